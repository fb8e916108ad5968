"""What the freshet source's driver side asks of the cluster per microbatch (a view that counts the requests)."""

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402

from freshet.spark.source import FreshetStreamReader, source_schema  # noqa: E402


class CountingView:
    """A cluster of known partition ends that notes each request the reader makes."""

    def __init__(self, ends: dict) -> None:
        self.ends = dict(ends)
        self.requests: list[str] = []

    def partitions(self) -> list:
        self.requests.append("metadata")
        return sorted(self.ends)

    def offsets(self, spec: str, partitions: list, at_least: dict | None = None) -> dict:
        self.requests.append(f"list offsets {spec}")
        return {tp: self.ends[tp] if spec == "latest" else 0 for tp in partitions}


def stream_reader(view: CountingView) -> FreshetStreamReader:
    reader = FreshetStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}, source_schema())
    reader.view = view
    return reader


def test_the_progress_report_takes_the_ends_that_latest_offset_just_asked_for():
    view = CountingView({("t", 0): 10, ("t", 1): 5})
    reader = stream_reader(view)
    assert reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"t": {"0": 10, "1": 5}}
    view.ends[("t", 0)] = 12  # records arrived in between
    assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 5}}
    assert view.requests == ["metadata", "list offsets latest"]  # one of each per microbatch, not two


def test_a_progress_report_with_no_latest_offset_before_it_asks_the_cluster():
    view = CountingView({("t", 0): 10})
    reader = stream_reader(view)
    reader.latestOffset({"t": {"0": 0}}, ReadAllAvailable())
    reader.reportLatestOffset()
    view.ends[("t", 0)] = 12
    assert reader.reportLatestOffset() == {"t": {"0": 12}}  # not the ends of a microbatch already reported
    assert view.requests[2:] == ["metadata", "list offsets latest"]
    reader.prepareForTriggerAvailableNow()  # Trigger.AvailableNow: latestOffset asks nothing, the report does
    view.ends[("t", 0)] = 15
    assert reader.latestOffset({"t": {"0": 0}}, ReadAllAvailable()) == {"t": {"0": 12}}
    assert reader.reportLatestOffset() == {"t": {"0": 15}}


def test_read_on_driver_gives_pyspark_the_simple_stream_reader():
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper, _streamReader

    from freshet.spark.source import FreshetDataSource, FreshetDriverStreamReader

    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "maxOffsetsPerTrigger": "500"}
    chosen = _streamReader(FreshetDataSource({**options, "readOnDriver": "true"}), source_schema())
    assert isinstance(chosen, _SimpleStreamReaderWrapper)
    assert isinstance(chosen.simple_reader, FreshetDriverStreamReader)
    assert chosen.simple_reader.limit.max_rows == 500
    for default in ({}, {"readOnDriver": "false"}):
        assert type(_streamReader(FreshetDataSource({**options, **default}), source_schema())) is FreshetStreamReader


class HeldBackAdmin:
    """An admin client whose first ``held`` metadata requests get no answer in time (librdkafka's error when the
    broker it asked is killed with the request in flight), then the metadata of one topic of two partitions."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.asked = 0

    def list_topics(self, timeout: float):
        from types import SimpleNamespace

        from confluent_kafka import KafkaError, KafkaException

        self.asked += 1
        if self.asked <= self.held:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"))
        topic = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={"t": topic})


@pytest.mark.parametrize("held, retries, answered", [(0, 3, True), (1, 3, True), (3, 3, True), (4, 3, False),
                                                     (1, 0, False)])
def test_a_metadata_request_with_no_answer_in_time_is_asked_again(held, retries, answered):
    """The source's metadata lookup retried as its offset lookups are (fetchOffset.numRetries): a lookup that
    timed out while a leader was killed failed the query (a fresh-clone run of the cluster suite, once)."""
    from freshet.spark.offsets import ClusterView, SourceError

    view = ClusterView("127.0.0.1:1", "subscribe", ["t"], retries=retries, retry_interval_s=0)
    view._admin = admin = HeldBackAdmin(held)
    if answered:
        assert view.partitions() == [("t", 0), ("t", 1)]
        assert admin.asked == held + 1
    else:
        with pytest.raises(SourceError, match="^cannot reach the Kafka cluster: .*Timed out"):
            view.partitions()
        assert admin.asked == retries + 1
