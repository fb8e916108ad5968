"""What `freshet cluster rebalance --apply` prints while Operations.apply carries a plan out."""

from freshet.controller.operations import Operations


class Scripted(Operations):
    """The controllers' answers without controllers: every reassignment completes at once; elections answer
    ``elections[partition]``."""

    def __init__(self, elections: dict[int, dict]) -> None:
        super().__init__([("127.0.0.1", 1)], timeout_s=5)
        self.elections = elections
        self.replicas: dict[int, list[int]] = {}

    def command(self, command: dict) -> dict:
        if command["command"] == "AlterPartitionReassignment":
            self.replicas[command["partition"]] = command["replicas"]
            return {"error": "NONE"}
        return self.elections[command["partition"]]

    def metadata(self) -> dict:
        partitions = [{"partition": i, "replicas": r, "leader": r[-1]} for i, r in self.replicas.items()]
        return {"topics": [{"name": "orders", "partitions": partitions}]}


def test_a_preferred_election_reads_elected_or_why_not():
    """It printed 'orders-0: preferred leader 2: NONE' for an election that worked."""
    lines: list[str] = []
    ops = Scripted({0: {"error": "NONE"}, 1: {"error": "PREFERRED_LEADER_NOT_AVAILABLE", "message": "not in ISR"}})
    ops.apply({("orders", 0): [2, 3], ("orders", 1): [3, 1]}, progress=lines.append)
    assert lines[-2:] == ["orders-0: preferred leader 2 elected",
                          "orders-1: preferred leader 3 not elected: PREFERRED_LEADER_NOT_AVAILABLE not in ISR"]
