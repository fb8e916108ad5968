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
