"""Per-subject encryption keys in a compacted topic: crypto-shredding.

Personal fields are sealed with AES-GCM under a key that belongs to one data subject. The keys live in
``{app}.keys`` (cleanup.policy=compact), one record per key, keyed ``subject/key-id``. Forgetting a subject
writes a tombstone for each of its keys; readers treat a tombstoned key as gone at once, and compaction
removes the key bytes from the log itself. Every copy of the events (replays, projection rebuilds, a copy of
the topic elsewhere) is then unreadable for that subject: the ciphertext stays, the key does not.

Keys are created where personal data is first sealed: by the command processor, inside the transaction that
appends the first event sealed with it (a reader that sees the event can find the key), and by a
``CommandClient`` sealing a command's personal fields, which appends the key and waits for it to be
acknowledged before it appends the command; the command carries ``keys_at``, the keys-topic offset its keys
lie below, and the processor reads the keys that far before it opens the command (``read_past``).
"""

from __future__ import annotations

import binascii
import os
import time
from binascii import a2b_base64

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from freshet.client import consumer_config, producer_config
from freshet.client.offsets import watermark_offsets
from freshet.client.reading import drain, read_committed_ranges, read_to_end, reader

from .events import b64

RANDOM_POOL_BYTES = 64 * 1024
CIPHER_CACHE = 4096  # subjects whose ciphers are kept (see SubjectKeys._cipher)
_forks = [0]  # a forked child must not hand out the bytes its parent's pool holds: it counts forks
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


class SubjectKeys:
    """The keys topic, read into memory and followed; seals and opens personal fields."""

    def __init__(self, bootstrap: str, topic: str, bulk: bool = True) -> None:
        """``bulk=False``: read with a consumer only, never the columnar reader (whose import costs a
        command-line client more than reading a keys topic of ordinary size)."""
        self.bootstrap, self.topic, self.bulk = bootstrap, topic, bulk
        self._keys: dict[str, bytes] = {}  # "subject/key-id" -> key
        self._current: dict[str, str] = {}  # subject -> the key reference new data is sealed with
        self._ciphers: dict[str, AESGCM] = {}  # key reference -> its cipher, for the most recent subjects
        self.created: list[tuple[str, bytes]] = []  # keys made since the last take_created(): to append
        self._missing: set[str] = set()  # references looked for after a fresh read and not found: forgotten
        self._consumer: Consumer | None = None
        self._loaded = False  # read to the end once: a key not found after that is looked for again
        self._position = 0
        self._pool, self._pool_at, self._pool_fork = b"", 0, _forks[0]  # random bytes not yet handed out

    def load(self) -> SubjectKeys:
        """Read the keys topic to its end (again: from where the last read stopped). The first read takes every
        key there is at once, through the columnar reader where it serves (no Message object per key: a
        rebuild's 100k keys in a sixth of the time); later ones follow with a consumer."""
        if self.bulk and not self._loaded and self._consumer is None:
            bulk = read_committed_ranges(self.bootstrap, {(self.topic, 0): self._position})
            if bulk is not None:
                chunks, ends = bulk
                for chunk in chunks:
                    for ref, value in zip(chunk.keys, chunk.values):
                        if ref is not None:
                            self._take(ref.decode(), value)
                self._position, self._loaded = ends[(self.topic, 0)], True
                return self
        if self._consumer is None:
            self._consumer = reader(self.bootstrap)
        ends = read_to_end(self._consumer, [(self.topic, 0, self._position if self._position else -2)], self._apply)
        self._position, self._loaded = ends[(self.topic, 0)], True
        return self

    @property
    def position(self) -> int:
        """The keys topic's offset this store has read up to: every key below it is known (or forgotten)."""
        return self._position

    def read_past(self, offset: int, timeout_s: float) -> bool:
        """Read the keys topic until this store has read every key below ``offset`` (keys a command's client
        appended before the command). False if it did not get there in ``timeout_s`` (a transaction left
        open on the keys topic holds readers back until it is aborted)."""
        deadline = time.monotonic() + timeout_s
        while self._position < offset:
            if self._consumer is None:
                self.load()
                continue
            self._take_messages(drain(self._consumer, 10_000, 0.05))  # what the consumer fetches, as it comes
            if self._position < offset and time.monotonic() > deadline:
                return False
        return True

    def written_end(self) -> int:
        """The keys topic's end counting records of transactions still open (its high watermark): a ``keys_at``
        past it names keys that were never written."""
        consumer = Consumer(consumer_config(self.bootstrap, overrides={"isolation.level": "read_uncommitted",
                                                                       "log_level": 0}))
        try:
            return watermark_offsets(consumer, TopicPartition(self.topic, 0), 30)[1]
        finally:
            consumer.close()

    def forked(self) -> None:
        """In a forked child: the parent's consumer (librdkafka's threads are not in the child) is not ours to
        use or close; a later read makes its own."""
        self._consumer = None

    def follow(self) -> None:
        """Take in whatever keys records have arrived since (no waiting): forgotten subjects stop being
        sealed for at once. The consumer stays assigned after ``load``, fetching in the background."""
        if self._consumer is None:
            self.load()
            return
        self._take_messages(self._consumer.consume(10_000, 0))

    def _take_messages(self, messages: list[Message]) -> None:
        for m in messages:
            err = m.error()
            if err is None:
                self._apply(m)
                self._position = m.offset() + 1
            elif err.code() == KafkaError._PARTITION_EOF:  # the end, past any transaction marker there
                self._position = max(self._position, m.offset())

    def _apply(self, m: Message) -> None:
        self._take(m.key().decode(), m.value())

    def _take(self, ref: str, value: bytes | None) -> None:
        if value is not None and self._keys.get(ref) == value:  # known already (the processor's own, read back)
            return
        subject = ref.rsplit("/", 1)[0]
        if value is None:  # forgotten
            self._keys.pop(ref, None)
            self._ciphers.pop(ref, None)
            self._missing.add(ref)
            if self._current.get(subject) == ref:
                del self._current[subject]
        else:
            self._keys[ref] = value
            self._current.setdefault(subject, ref)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # sealing ---------------------------------------------------------------------------------------
    def seal(self, subject: str, plaintext: bytes) -> dict:
        ref = self._current.get(subject)
        if ref is None:
            fresh = self._random(48)  # a key id and a 256-bit key (uuid4 costs 5x as much, measured)
            ref, key = f"{subject}/{fresh[:16].hex()}", fresh[16:]
            self._keys[ref], self._current[subject] = key, ref
            self.created.append((ref, key))
        cipher = self._ciphers.get(ref)
        if cipher is None:
            cipher = self._cipher(ref, self._keys[ref])
        nonce = self._random(12)
        return {"key": ref, "sealed": b64(nonce + cipher.encrypt(nonce, plaintext, ref.encode()))}

    def _cipher(self, ref: str, key: bytes) -> AESGCM:
        """A key's cipher, kept for the next fields of the same subject. The cache is bounded: a replay opens
        most subjects' fields about once, and would otherwise keep a cipher for every subject in the log."""
        ciphers = self._ciphers
        if len(ciphers) >= CIPHER_CACHE:
            ciphers.clear()
        cipher = ciphers[ref] = AESGCM(key)
        return cipher

    def _random(self, n: int) -> bytes:
        """``n`` bytes from the operating system's CSPRNG, drawn 64 KiB at a time (os.urandom is a system call:
        two per sealed field cost more than the encryption). Each byte is handed out once."""
        pool, at = self._pool, self._pool_at
        if at + n > len(pool) or self._pool_fork != _forks[0]:
            pool, at = self._pool, self._pool_at = os.urandom(RANDOM_POOL_BYTES), 0
            self._pool_fork = _forks[0]
        self._pool_at = at + n
        return pool[at:at + n]

    def open(self, sealed: dict) -> bytes | None:
        """The plaintext, or None when the key is forgotten (or the value was tampered with)."""
        ref = sealed.get("key")
        key = self._keys.get(ref)
        if key is None and ref not in self._missing and self._loaded:
            self.load()  # a key made after our last read: the processor appends it with the event
            key = self._keys.get(ref)
        if key is None:
            self._missing.add(ref)
            return None
        try:
            raw = a2b_base64(sealed.get("sealed", ""))
        except (binascii.Error, TypeError, ValueError):
            return None  # not what seal() wrote: unreadable, as tampered data is
        cipher = self._ciphers.get(ref)
        if cipher is None:
            cipher = self._cipher(ref, key)
        try:
            return cipher.decrypt(raw[:12], raw[12:], ref.encode())
        except (InvalidTag, ValueError):
            return None

    def take_created(self) -> list[tuple[str, bytes]]:
        created, self.created = self.created, []
        return created

    def discard(self, ref: str) -> None:
        """Drop one key this store made (it was never appended): nothing is sealed with it again."""
        self._keys.pop(ref, None)
        self._ciphers.pop(ref, None)
        subject = ref.rsplit("/", 1)[0]
        if self._current.get(subject) == ref:
            del self._current[subject]

    def forget_pending(self) -> None:
        """Drop keys made for a transaction that was not committed."""
        for ref, _ in self.take_created():
            self.discard(ref)

    # forgetting ------------------------------------------------------------------------------------
    def subjects(self) -> set[str]:
        return set(self._current)

    def forget(self, subject: str) -> int:
        """Tombstone every key of ``subject``; returns how many. Idempotent."""
        self.load()
        refs = [ref for ref in self._keys if ref.rsplit("/", 1)[0] == subject]
        if refs:
            producer = Producer(producer_config(self.bootstrap, {"log_level": 0}))
            for ref in refs:
                producer.produce(self.topic, None, ref.encode(), partition=0)
            if producer.flush(30):
                raise RuntimeError(f"the tombstones for {subject} were not acknowledged")
            self.load()
        return len(refs)
