"""The client's errors live in freshet.client.errors, which every client module imports (no circle through
admin)."""

import pytest
from confluent_kafka import KafkaError, KafkaException

import freshet.client
from freshet.client.config import read_properties
from freshet.client.errors import ClientError, kafka_message


def test_an_unreadable_command_config_is_a_client_error(tmp_path):
    with pytest.raises(ClientError, match=r"cannot read the command config .*missing\.properties: No such file"):
        read_properties(str(tmp_path / "missing.properties"))


def test_one_client_error_class_everywhere():
    assert freshet.client.ClientError is ClientError
    assert freshet.client.admin.ClientError is ClientError


def test_kafka_message_is_librdkafkas_words():
    exc = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
    assert kafka_message(exc) == "broker down"
    assert kafka_message(ValueError("plain")) == "plain"
