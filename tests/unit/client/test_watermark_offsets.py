"""freshet.client.offsets.watermark_offsets: a leader that cannot answer ListOffsets yet is asked again."""

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from freshet.client.offsets import watermark_offsets

TP = TopicPartition("t", 3)


class FakeConsumer:
    """Answers get_watermark_offsets from a script: an error code is raised as librdkafka raises it (a
    KafkaException whose KafkaError is not marked retriable), a tuple is returned."""

    def __init__(self, *script):
        self.script = list(script)
        self.calls = []

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        self.calls.append((tp.topic, tp.partition, timeout, cached))
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, tuple):
            return answer
        raise KafkaException(KafkaError(answer, "Leader high watermark is not caught up"))


def test_asks_again_while_the_new_leader_answers_offset_not_available():
    consumer = FakeConsumer(KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.OFFSET_NOT_AVAILABLE, (4, 17))
    assert watermark_offsets(consumer, TP, 30) == (4, 17)
    assert len(consumer.calls) == 3
    assert all(call[:2] == ("t", 3) and call[3] is False and 0 < call[2] <= 30 for call in consumer.calls)


@pytest.mark.parametrize("code", [KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH])
def test_asks_again_while_the_leader_moves(code):
    consumer = FakeConsumer(code, (0, 5))
    assert watermark_offsets(consumer, TP, 30) == (0, 5)
    assert len(consumer.calls) == 2


def test_an_error_marked_retriable_is_asked_again():
    class Marked(FakeConsumer):
        def get_watermark_offsets(self, tp, timeout=None, cached=False):
            if not self.calls:
                self.calls.append(tp)
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True))
            return (1, 2)

    assert watermark_offsets(Marked(), TP, 30) == (1, 2)


def test_any_other_error_is_raised_at_once():
    consumer = FakeConsumer(KafkaError.UNKNOWN_TOPIC_OR_PART, (0, 5))
    with pytest.raises(KafkaException) as raised:
        watermark_offsets(consumer, TP, 30)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(consumer.calls) == 1


def test_the_last_error_is_raised_when_the_timeout_is_spent():
    consumer = FakeConsumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE)
    with pytest.raises(KafkaException) as raised:
        watermark_offsets(consumer, TP, 0.5)
    assert raised.value.args[0].code() == KafkaError.OFFSET_NOT_AVAILABLE
    assert len(consumer.calls) >= 2
    assert all(0 < call[2] <= 0.5 for call in consumer.calls)
