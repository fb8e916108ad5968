"""What clients are told by a broker that does not lead a partition, or is asked with another leader epoch
(NOT_LEADER_OR_FOLLOWER with KIP-951's current leader and its endpoint, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH), and OffsetForLeaderEpoch answered from the leader-epoch cache."""

from kio.schema.errors import ErrorCode

from .conftest import batch, produce, wait_until


def fetch_body(topic: str, offset: int, current_leader_epoch: int = -1, replica_id: int = -1,
               topic_id=None) -> dict:
    return {"replica_id": replica_id, "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_a_follower_answers_produce_and_fetch_with_the_current_leader(run):
    async def scenario(cluster):
        await cluster.replicated_topic("hinted", (0, 1, 2), leader_epoch=4)
        follower = await cluster.connect(1)
        answer, response = await produce(follower, "hinted", batch(b"x"), acks=-1, version=10)
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (0, 4)
        assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [
            (0, "127.0.0.1", cluster.brokers[0].port)]
        assert cluster.partition(1, "hinted").log_end_offset == 0  # nothing written on the follower
        answer, _ = await produce(follower, "hinted", batch(b"x"), acks=1, version=9)  # before KIP-951: the code
        assert answer.error_code == ErrorCode.not_leader_or_follower
        topic_id = cluster.brokers[1].registry.get("hinted").topic_id  # v13+ name topics by id
        response = await follower.request(1, 16, fetch_body("hinted", 0, topic_id=topic_id))
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (0, 4)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(0, cluster.brokers[0].port)]
        response = await follower.request(1, 12, fetch_body("hinted", 0))
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.not_leader_or_follower and part.current_leader.leader_id == 0
        response = await follower.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "hinted", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert response.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        follower.close()

    run(scenario)


def test_the_leader_checks_the_clients_leader_epoch(run):
    async def scenario(cluster):
        await cluster.replicated_topic("epoch", (0, 1), leader_epoch=3)
        leader = await cluster.connect(0)
        answer, _ = await produce(leader, "epoch", batch(b"a", b"b"), acks=-1)
        assert answer.error_code == ErrorCode.none

        async def fetch_code(current):
            response = await leader.request(1, 12, fetch_body("epoch", 0, current))
            return response.responses[0].partitions[0]

        assert (await fetch_code(2)).error_code == ErrorCode.fenced_leader_epoch
        assert (await fetch_code(5)).error_code == ErrorCode.unknown_leader_epoch
        read = await fetch_code(3)
        assert read.error_code == ErrorCode.none and read.high_watermark == 2 and len(read.records) > 0
        assert (await fetch_code(-1)).error_code == ErrorCode.none  # no epoch given: not checked

        async def list_offsets(current):
            response = await leader.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "epoch", "partitions": [{"partition_index": 0, "current_leader_epoch": current,
                                                  "timestamp": -1}]}]})
            return response.topics[0].partitions[0]

        assert (await list_offsets(2)).error_code == ErrorCode.fenced_leader_epoch
        assert (await list_offsets(4)).error_code == ErrorCode.unknown_leader_epoch
        latest = await list_offsets(3)
        assert (latest.error_code, latest.offset, latest.leader_epoch) == (ErrorCode.none, 2, 3)
        leader.close()

    run(scenario, count=2)


def test_offset_for_leader_epoch_is_answered_from_the_epoch_cache(run):
    async def scenario(cluster):
        await cluster.replicated_topic("cache", (0, 1))
        connection = await cluster.connect(0)
        for _ in range(3):
            answer, _ = await produce(connection, "cache", batch(b"e0"), acks=-1)
            assert answer.error_code == ErrorCode.none
        cluster.set_state("cache", leader_epoch=2, partition_epoch=1)  # re-elected: epoch 2 starts at 3
        await cluster.apply()
        for _ in range(2):
            answer, _ = await produce(connection, "cache", batch(b"e2"), acks=-1)
            assert answer.error_code == ErrorCode.none

        async def ask(epoch, current=-1, node=0, conn=connection):
            response = await conn.request(23, 4, {"replica_id": -1, "topics": [{"topic": "cache", "partitions": [
                {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
            r = response.topics[0].partitions[0]
            return r.error_code.name, r.leader_epoch, r.end_offset

        assert await ask(0) == ("none", 0, 3)  # epoch 0 ends where epoch 2 begins
        assert await ask(1) == ("none", 0, 3)  # never had epoch 1: the largest epoch below it, and its end
        assert await ask(2) == ("none", 2, 5)  # the current epoch ends at the log end
        assert await ask(3) == ("none", -1, -1)  # newer than any
        assert await ask(2, current=1) == ("fenced_leader_epoch", -1, -1)
        assert await ask(2, current=3) == ("unknown_leader_epoch", -1, -1)
        follower = await cluster.connect(1)
        assert await ask(0, conn=follower) == ("not_leader_or_follower", -1, -1)
        follower.close()
        connection.close()

    run(scenario, count=2)


def test_a_replica_fetch_counts_as_that_followers_progress(run):
    """Fetch v15+ names the replica in ReplicaState (KIP-903), before v15 in replica_id: both count."""
    async def scenario(cluster):
        cluster.create_topic("progress", replicas=(0, 1, 2))
        await cluster.apply(nodes=[0])  # brokers 1 and 2 do not fetch by themselves: this test does
        connection = await cluster.connect(0)
        topic_id = cluster.brokers[0].registry.get("progress").topic_id
        answer, _ = await produce(connection, "progress", batch(b"a", b"b", b"c"), acks=1)
        assert answer.error_code == ErrorCode.none
        leader = cluster.partition(0, "progress")
        await wait_until(lambda: leader.durable_offset == 3, "the leader's fsync")
        assert leader.high_watermark == 0
        response = await connection.request(1, 15, fetch_body("progress", 0, replica_id=1, topic_id=topic_id))
        read = response.responses[0].partitions[0]
        assert read.error_code == ErrorCode.none and len(read.records) > 0  # a follower reads past the HW
        await connection.request(1, 15, fetch_body("progress", 3, replica_id=1, topic_id=topic_id))
        assert leader.high_watermark == 0  # broker 2 of the ISR has nothing yet
        await connection.request(1, 12, fetch_body("progress", 3, replica_id=2))
        assert leader.high_watermark == 3
        stranger = (await connection.request(1, 12, fetch_body("progress", 0, replica_id=7))).responses[0]
        assert stranger.partitions[0].error_code == ErrorCode.not_leader_or_follower
        ahead = (await connection.request(1, 12, fetch_body("progress", 9, replica_id=1))).responses[0]
        assert ahead.partitions[0].error_code == ErrorCode.offset_out_of_range
        connection.close()

    run(scenario)


def test_a_consumer_ahead_of_a_new_leaders_high_watermark_gets_nothing_yet_not_out_of_range(run):
    """A consumer's position is the old leader's high watermark; the new leader learns its own from its followers'
    next fetches. Until then a fetch there is answered empty (Kafka: only past the log end is out of range)."""
    async def scenario(cluster):
        await cluster.replicated_topic("lagging", (0, 1), nodes=[0])  # broker 1 does not follow by itself
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "lagging", batch(b"a", b"b"), acks=1)
        assert answer.error_code == ErrorCode.none
        leader = cluster.partition(0, "lagging")
        await wait_until(lambda: leader.durable_offset == 2, "the leader's fsync")
        assert leader.high_watermark == 0 and leader.log_end_offset == 2
        for offset, code in ((1, ErrorCode.none), (2, ErrorCode.none), (3, ErrorCode.offset_out_of_range)):
            part = (await connection.request(1, 12, fetch_body("lagging", offset))).responses[0].partitions[0]
            assert (part.error_code, part.high_watermark) == (code, 0)
            assert not part.records
        connection.close()

    run(scenario, count=2)


def test_a_replica_fetch_below_the_log_start_is_out_of_range_and_changes_nothing(run):
    """As Kafka (the read comes before the follower's state is updated): a replica's fetch before the leader's
    log start (a negative one too) is OFFSET_OUT_OF_RANGE with the log start, and does not move what the leader
    knows of that follower."""
    async def scenario(cluster):
        cluster.create_topic("below", replicas=(0, 1))
        await cluster.apply(nodes=[0])
        connection = await cluster.connect(0)
        answer, _ = await produce(connection, "below", batch(b"a", b"b"), acks=1)
        assert answer.error_code == ErrorCode.none
        await wait_until(lambda: cluster.partition(0, "below").durable_offset == 2, "the leader's fsync")
        await connection.request(1, 12, fetch_body("below", 2, replica_id=1))
        progress = cluster.brokers[0].replicas.leaders[("below", 0)].followers[1]
        assert progress.log_end_offset == 2
        for offset in (-1, -7):
            read = (await connection.request(1, 12, fetch_body("below", offset, replica_id=1))).responses[0]
            assert read.partitions[0].error_code == ErrorCode.offset_out_of_range
            assert read.partitions[0].log_start_offset == 0
            assert progress.log_end_offset == 2
        connection.close()

    run(scenario, count=2)
