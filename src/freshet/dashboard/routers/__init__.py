"""The dashboard's routes, one module per concern; each reads the app's collector through ``Source``."""

from __future__ import annotations

from typing import Annotated

from confluent_kafka.admin import AdminClient
from fastapi import Depends, HTTPException, Request

from ..collector import Collector
from ..login import COOKIE


def collector_of(request: Request) -> Collector:
    return request.app.state.collector


Source = Annotated[Collector, Depends(collector_of)]


def credentials_of(request: Request) -> dict | None:
    """The signed-in user's SASL settings when the dashboard has sign-in (``--login``) and the request a session;
    None: the dashboard's own credentials (no sign-in, or a request with the token)."""
    login = request.app.state.login
    return login.credentials(request.cookies.get(COOKIE)) if login is not None else None


def admin_of(request: Request) -> AdminClient:
    """The admin client that changes the cluster for this request: the signed-in user's, else the dashboard's."""
    login = request.app.state.login
    acting = login.admin_for(request.cookies.get(COOKIE)) if login is not None else None
    return acting if acting is not None else request.app.state.collector.admin


Admin = Annotated[AdminClient, Depends(admin_of)]
Credentials = Annotated[dict | None, Depends(credentials_of)]
VISIBLE_TTL_S = 5.0  # how long what a signed-in user may see is kept before it is asked again


def visible_to(request: Request) -> tuple[set[str], set[str]] | None:
    """(topics, groups) the signed-in user may see, asked as them (Metadata names the topics they may DESCRIBE,
    ListGroups the groups), kept ``VISIBLE_TTL_S`` per session; None: no sign-in, or a request with the token (the
    dashboard's own view). Blocking: call it off the event loop."""
    import time

    login = request.app.state.login
    session = request.cookies.get(COOKIE)
    admin = login.admin_for(session) if login is not None else None
    if admin is None:
        return None
    seen = request.app.state.visible
    for gone in [s for s in seen if login.user_of(s) is None]:  # signed out or expired
        seen.pop(gone)
        request.app.state.readable.pop(gone, None)
    at, topics, groups = seen.get(session, (0.0, set(), set()))
    if time.monotonic() - at > VISIBLE_TTL_S:
        metadata = admin.list_topics(timeout=10)
        topics = {name for name, t in metadata.topics.items() if t.error is None}
        groups = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        shares = [g for g, x in request.app.state.collector.snapshot.groups.items()
                  if x.get("type") == "share" and g not in groups]
        groups |= describable(admin, shares)
        seen[session] = (time.monotonic(), topics, groups)
    return topics, groups


def readable_to(request: Request, topics: tuple[str, ...]) -> set[str] | None:
    """Of ``topics``, those the signed-in user may READ (``acting.may_read``, asked as them, kept
    ``VISIBLE_TTL_S`` per session; a topic their Metadata does not name is not theirs, one the cluster does not
    have yet is nobody's and hides nothing); None: no sign-in, or a
    request with the token (the dashboard reads for itself). Blocking: call it off the event loop."""
    import time

    from ..acting import may_read

    login = request.app.state.login
    session = request.cookies.get(COOKIE)
    credentials = login.credentials(session) if login is not None else None
    if credentials is None:
        return None
    known = request.app.state.readable.setdefault(session, {})  # topic -> (asked at, may read)
    stale = [t for t in topics if time.monotonic() - known.get(t, (-VISIBLE_TTL_S - 1, False))[0] > VISIBLE_TTL_S]
    if stale:
        described = visible_to(request)[0]
        found = may_read(login.bootstrap, credentials, [t for t in stale if t in described])
        known.update({t: (time.monotonic(), t in found) for t in stale})
    snapshot = request.app.state.collector.snapshot
    if not snapshot.at:  # before the collector's first round, whether a registry exists is not known: not shown
        return {t for t in topics if known[t][1]}
    existing = snapshot.topic_names or snapshot.topics
    return {t for t in topics if known[t][1] or t not in existing}  # a registry not made yet: nothing to hide


def sees_cluster(request: Request) -> bool | None:
    """Whether the signed-in user may describe the cluster's configs (``acting.may_describe_cluster``, kept as
    ``readable_to`` keeps its answers); None: no sign-in. Blocking."""
    import time

    from ..acting import may_describe_cluster

    login = request.app.state.login
    session = request.cookies.get(COOKIE)
    admin = login.admin_for(session) if login is not None else None
    if admin is None:
        return None
    known = request.app.state.readable.setdefault(session, {})
    at, yes = known.get(":cluster", (-VISIBLE_TTL_S - 1, False))
    if time.monotonic() - at > VISIBLE_TTL_S:
        yes = may_describe_cluster(admin)
        known[":cluster"] = (time.monotonic(), yes)
    return yes


def unreadable(topic: str, what: str) -> HTTPException:
    """The one line a tab shows when the signed-in user may not READ the topic it is made from."""
    return HTTPException(403, f"cannot show {what}: TOPIC_AUTHORIZATION_FAILED: this user may not read {topic}")


def describable(admin: AdminClient, group_ids: list[str]) -> set[str]:
    """The groups among ``group_ids`` that ``admin``'s user may describe. librdkafka's ListGroups leaves share
    groups out, so these are asked of the group's coordinator by name: the cluster checks DESCRIBE on the group
    first and answers GROUP_AUTHORIZATION_FAILED without it (as Kafka's ShareGroupDescribe does); a group it then
    finds to be of another type (GROUP_ID_NOT_FOUND) was the user's to describe. No answer: not shown."""
    from confluent_kafka import KafkaError, KafkaException

    if not group_ids:
        return set()
    out = set()
    for group_id, future in admin.describe_consumer_groups(group_ids, request_timeout=10).items():
        try:
            future.result(15)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                continue
        out.add(group_id)
    return out


def one(mapping: dict, key: str, missing: str) -> dict:
    """``mapping[key]`` of the collector's snapshot; a 404 saying ``missing`` when there is none."""
    found = mapping.get(key)
    if found is None:
        raise HTTPException(404, missing)
    return found


def history(collector: Collector, key: str) -> list:
    """The chart samples of one series (``collector.series`` matches by prefix; this takes the one key)."""
    return collector.series(key).get(key, [])


Visible = Annotated[tuple[set[str], set[str]] | None, Depends(visible_to)]  # a sync dependency: FastAPI runs it
# on its thread pool
