"""Tweets and follows (the Twitter home-timeline example), in event-time order.

Users start by following a few others; then tweets, with now and then a follow or an unfollow.
Follows are keyed by follower, so one pair's follow and unfollow stay in order in one partition.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Iterator

WORDS = ["log", "stream", "window", "join", "state", "offset", "partition", "replay", "watermark", "view"]


@dataclass(frozen=True)
class Tweet:
    tweet_id: str
    user: str
    text: str
    ts_ms: int

    @property
    def key(self) -> bytes:
        return self.user.encode()

    def value(self) -> bytes:
        return json.dumps({"tweet_id": self.tweet_id, "user": self.user, "text": self.text, "ts": self.ts_ms}).encode()


@dataclass(frozen=True)
class Follow:
    follower: str
    followee: str
    op: str  # "follow" | "unfollow"
    ts_ms: int

    @property
    def key(self) -> bytes:
        return self.follower.encode()

    def value(self) -> bytes:
        return json.dumps({"follower": self.follower, "followee": self.followee, "op": self.op,
                           "ts": self.ts_ms}).encode()


def timeline_events(users: int = 50, tweets: int = 2000, seed: int = 1, start_ms: int = 1_767_225_600_000,
                    every_ms: int = 1000, follows_per_user: int = 5, churn: float = 0.05) -> Iterator[Tweet | Follow]:
    """Initial follows, then ``tweets`` tweets; after each, with probability ``churn``, a user
    unfollows one account or follows a new one."""
    rng = random.Random(seed)
    names = [f"user{i}" for i in range(users)]
    following: dict[str, set[str]] = {u: set() for u in names}
    ts = start_ms
    for u in names:
        for v in rng.sample([n for n in names if n != u], min(follows_per_user, users - 1)):
            following[u].add(v)
            yield Follow(u, v, "follow", ts)
        ts += 1
    for i in range(tweets):
        ts += every_ms
        author = rng.choice(names)
        yield Tweet(f"t{i}", author, " ".join(rng.choices(WORDS, k=5)), ts)
        if rng.random() < churn:
            u = rng.choice(names)
            if following[u] and rng.random() < 0.5:
                v = rng.choice(sorted(following[u]))
                following[u].discard(v)
                yield Follow(u, v, "unfollow", ts + 1)
            else:
                candidates = [n for n in names if n != u and n not in following[u]]
                if candidates:
                    v = rng.choice(candidates)
                    following[u].add(v)
                    yield Follow(u, v, "follow", ts + 1)
