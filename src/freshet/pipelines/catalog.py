"""The one list of ready pipelines. ``freshet run``, the runner and the demo all read it.

Each pipeline is a pure function of the raw DataFrames the freshet source gives (one per topic it
reads, in the order of ``inputs``). Most return a result DataFrame that any sink takes; the two
that keep a view in PostgreSQL (``view``) return the streaming writer that maintains it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC

from . import access_logs as al
from . import cep, enrichment, event_sourced, event_windows, joins, statsd_rollup, timeline
from .stateful import DEFAULT_LATENESS


@dataclass(frozen=True)
class Pipeline:
    name: str
    summary: str
    inputs: tuple[str, ...]  # what each topic of --from holds, in order
    keys: tuple[str, ...] = ()  # primary key of the result (upsert sinks, topic keys)
    final: bool = False  # results are final when emitted (append mode); else corrected (update mode)
    # (raw DataFrames..., lateness) -> result DataFrame, for any sink
    result: Callable[..., DataFrame] | None = None
    # (raw DataFrames..., dsn, table, sink_id, lateness) -> DataStreamWriter keeping a PostgreSQL view
    view: Callable[..., Any] | None = None
    # result also takes bootstrap= (it reads definitions kept in a topic: rules, stored queries)
    needs_bootstrap: bool = False

    @property
    def postgres_only(self) -> bool:
        return self.view is not None


def _access_logs(fn: Callable[..., DataFrame]) -> Callable[..., DataFrame]:
    return lambda raw, lateness=DEFAULT_LATENESS: fn(al.parse(raw), lateness=lateness)


def _click_through(searches: DataFrame, clicks: DataFrame, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    return joins.click_through(joins.parse_json(searches, joins.SEARCH_SCHEMA, "search_time"),
                               joins.parse_json(clicks, joins.CLICK_SCHEMA, "click_time"), lateness)


def _favourite_urls(activity, users, dsn: str, table: str, sink_id: str, lateness: str):
    return enrichment.writer(activity, users, dsn, table, lateness=lateness, sink_id=sink_id)


def _timeline(tweets, follows, dsn: str, table: str, sink_id: str, lateness: str):
    return timeline.writer(tweets, follows, dsn, table, sink_id=sink_id)


ACCESS_LOGS = ("access logs",)

CATALOG: dict[str, Pipeline] = {p.name: p for p in (
    Pipeline("requests-per-minute", "tumbling 1-minute windows: requests, bytes, server errors", ACCESS_LOGS,
             ("window_start",), result=_access_logs(al.requests_per_minute)),
    Pipeline("hopping-average", "5-minute windows every minute: average requests per minute and response size", ACCESS_LOGS,
             ("window_start",), result=_access_logs(al.hopping_average)),
    Pipeline("size-percentiles", "p50/p99 response size per 5 minutes", ACCESS_LOGS,
             ("window_start",), result=_access_logs(al.size_percentiles)),
    Pipeline("unique-users", "unique clients per hour, exact and HyperLogLog", ACCESS_LOGS,
             ("window_start",), result=_access_logs(al.unique_users_per_hour)),
    # Spark has no update mode for session windows: a session is written once the watermark closes it
    Pipeline("sessions", "sessions per client (30 minutes of silence ends one)", ACCESS_LOGS,
             ("client_ip", "session_start"), final=True, result=_access_logs(al.sessions)),
    Pipeline("trend", "each minute's requests beside the minute before: spikes and drops", ACCESS_LOGS,
             ("window_start",), final=True, result=_access_logs(al.requests_trend)),
    Pipeline("count-windows", "per client, one result every 100 requests", ACCESS_LOGS,
             ("client_ip", "window_index"), final=True,
             result=_access_logs(lambda events, lateness: event_windows.count_windows(events, n=100))),
    Pipeline("sliding-windows", "per request, the same client's requests in the 10 minutes before", ACCESS_LOGS,
             ("partition", "offset"), final=True,
             result=_access_logs(lambda events, lateness: event_windows.sliding_event_windows(
                 events, span_seconds=600, lateness=lateness))),
    Pipeline("click-through", "searches joined with the clicks that followed, per query and window",
             ("searches", "clicks"), ("window_start", "query"), final=True, result=_click_through),
    Pipeline("favourite-urls", "activity enriched with the CDC users table: favourite URL per age group",
             ("activity", "users"), view=_favourite_urls),
    Pipeline("timeline", "home timelines kept in PostgreSQL from tweets and follows", ("tweets", "follows"),
             view=_timeline),
    Pipeline("course-enrollment", "the enrollment example's events: per course, title, capacity, enrolled, "
             "refused (a Spark projection)", ("events of an event-sourced application",), ("course",),
             result=lambda raw, lateness=DEFAULT_LATENESS: event_sourced.course_enrollment(
                 event_sourced.events(raw))),
    Pipeline("statsd-rollup", "StatsD metrics per 10 s, as StatsD flushes them: counters and rates, gauges, "
             "timer percentiles, set sizes", ("StatsD metrics (freshet ingest serve --statsd)",),
             ("window_start", "name", "type", "tags"),
             result=lambda raw, lateness=statsd_rollup.FLUSH_INTERVAL: statsd_rollup.rollup(
                 statsd_rollup.parse(raw), lateness=lateness)),
    Pipeline("cep", "complex event processing: every match of the stored rules (freshet rules add), each once, "
             "as the watermark passes it", ("JSON events",), ("rule", "key", "match_start"), final=True,
             needs_bootstrap=True,
             result=lambda raw, lateness=DEFAULT_LATENESS, bootstrap=None: cep.match_rules(
                 raw, cep.TopicRules(bootstrap, RULES_TOPIC), lateness)),
    Pipeline("watch", "search on streams: each event matched against the stored queries (freshet watch add)",
             ("JSON events",), ("topic", "partition", "offset"), final=True, needs_bootstrap=True,
             result=lambda raw, lateness=DEFAULT_LATENESS, bootstrap=None: cep.match_queries(
                 raw, cep.TopicRules(bootstrap, WATCHES_TOPIC))),
)}


def names() -> list[str]:
    return sorted(CATALOG)
