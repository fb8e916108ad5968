"""An endpoint with a producer of its own gets delivery reports for failures only: its delivered count is
what it handed over, less what failed and what the producer still holds."""

from freshet.ingest.buffer import EndpointStats


class HeldRecords:
    """Stands in for a producer: ``len()`` is what it still holds (librdkafka's out queue)."""

    def __init__(self) -> None:
        self.held = 0

    def __len__(self) -> int:
        return self.held


def test_delivered_is_handed_over_less_failed_and_held_and_never_counts_down():
    stats = EndpointStats("syslog-udp", "udp", "127.0.0.1:5514", "syslog", "drop")
    producer = stats.producer = HeldRecords()
    stats.received, producer.held = 10, 10
    assert (stats.buffered, stats.as_dict()["delivered"]) == (10, 0)
    producer.held = 4  # six acknowledged
    assert (stats.buffered, stats.delivered) == (4, 6)
    stats.report(object(), None)  # one fails: its report was the last thing held
    producer.held = 3
    assert stats.as_dict()["delivered"] == 6 and stats.failed == 1 and stats.buffered == 3
    producer.held = 5  # two handed over, not yet counted as received (another thread): no count down
    assert stats.as_dict()["delivered"] == 6
    stats.received, producer.held = 12, 0
    assert (stats.as_dict()["delivered"], stats.buffered) == (11, 0)


def test_an_endpoint_on_the_shared_producer_counts_its_reports():
    stats = EndpointStats("http", "http", "127.0.0.1:8082", None, "reject")
    stats.received = 3
    stats.report(None, None)
    stats.report(None, None)
    assert (stats.delivered, stats.buffered) == (2, 1)
