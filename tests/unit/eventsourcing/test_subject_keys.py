"""SubjectKeys without a broker: sealing draws key material and nonces from a pool of OS randomness."""

import os

from freshet.eventsourcing.keys import RANDOM_POOL_BYTES, SubjectKeys


def test_sealed_fields_open_and_every_nonce_and_key_is_fresh():
    keys = SubjectKeys("127.0.0.1:1", "app.keys")  # no consumer is made until load()/follow()
    sealed = [keys.seal(f"student-{i % 50}", f"name {i}".encode()) for i in range(RANDOM_POOL_BYTES // 12 + 500)]
    assert [keys.open(s) for s in sealed[:3]] == [b"name 0", b"name 1", b"name 2"]
    nonces = [s["sealed"][:16] for s in sealed]  # base64 of the 12-byte nonce: its first 16 characters
    assert len(set(nonces)) == len(nonces)  # across pool refills too
    created = keys.take_created()
    assert len(created) == 50 and len({key for _, key in created}) == 50


def test_a_forked_child_does_not_reuse_its_parents_pool():
    keys = SubjectKeys("127.0.0.1:1", "app.keys")
    keys.seal("s", b"x")  # fills the pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, keys._random(32))
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 32)
    assert child != keys._random(32)
