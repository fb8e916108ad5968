"""``freshet demo sql``: the five-minute tour of docs/sql.md, run and checked.

1. generated web access logs go into a topic;
2. ``CREATE STREAM`` declares them, the fields computed from each line; ``SHOW STREAMS`` and ``DESCRIBE``;
3. push queries: requests per minute and unique clients per hour, each equal to what the Python pipeline
   (``freshet run requests-per-minute`` / ``unique-users``) computes from the same lines;
4. ``EXPLAIN``: the plan Spark runs;
5. a mistake is one line naming its line and column, and changes nothing;
6. a new session (another ``freshet sql``) finds the stream as it was declared: definitions live in the broker.
"""

from __future__ import annotations

import itertools
import os

import click
from confluent_kafka import Producer
from rich.markup import escape
from rich.table import Table

from .preamble import Demo, data_dir_option

TOPIC = "access-logs"
LINES = 3000
CREATE = f"""CREATE STREAM access (
  line STRING,
  client_ip  AS regexp_extract(line, r'^(\\S+)', 1),
  event_time AS to_timestamp(regexp_extract(line, r'\\[([^\\]]+)\\]', 1), 'dd/MMM/yyyy:HH:mm:ss Z'),
  path       AS regexp_extract(line, r'"\\S+ (\\S+)', 1),
  status     AS CAST(regexp_extract(line, r'" (\\d{{3}}) ', 1) AS INT),
  size       AS CAST(regexp_extract(line, r'" \\d{{3}} (\\d+)', 1) AS BIGINT)
) WITH (topic='{TOPIC}', format='raw', timestamp='event_time', watermark='2 minutes')"""
PER_MINUTE = """SELECT window.start AS minute, count(*) AS requests,
       sum(CASE WHEN status >= 500 THEN 1 ELSE 0 END) AS errors
FROM access GROUP BY window(event_time, '1 minute')
EMIT CHANGES UNTIL {n} ROWS"""
PER_HOUR = """SELECT window.start AS hour, size(collect_set(client_ip)) AS exact,
       approx_count_distinct(client_ip, 0.05) AS approx
FROM access GROUP BY window(event_time, '1 hour')
EMIT CHANGES UNTIL {n} ROWS"""
MISTAKE = "SHOW STREAMS;\nSELECT path, count(*) FROM access\n  GROUP BY pth EMIT CHANGES"


@click.command("sql")
@data_dir_option("sql")
def sql_demo(data_dir: str) -> None:
    """SQL over a topic: CREATE STREAM, push queries equal to the Python pipelines, EXPLAIN, errors, restarts."""
    from freshet.cli.common import stderr_to

    with Demo(data_dir) as demo, stderr_to(os.path.join(demo.data_dir, "spark.log")):
        _tour(demo)
        demo.finish()


def _tour(demo: Demo) -> None:
    from freshet.client.admin import TopicAdmin
    from freshet.gen.access_logs import AccessLogGenerator
    from freshet.pipelines import access_logs as al
    from freshet.sql.errors import SqlError
    from freshet.sql.session import SqlSession

    say = demo.console.print
    say(f"[bold]1.[/] {LINES} access-log lines (event time over ~10 minutes, some late) into topic {TOPIC}")
    TopicAdmin(demo.bootstrap).create_topic(TOPIC, 2)
    lines = [e.line for e in itertools.islice(
        AccessLogGenerator(seed=3, users=60, rate_per_s=5.0, start_ms=1_767_225_600_000).events(), LINES)]
    producer = Producer({"bootstrap.servers": demo.bootstrap, "linger.ms": 20})
    for line in lines:
        producer.produce(TOPIC, line.encode())
    demo.require(producer.flush(30) == 0, "every line produced")

    say("[bold]2.[/] the stream, declared in SQL (Spark starts: ~10-30 s)")
    say(CREATE, style="cyan", markup=False, highlight=False)
    session = SqlSession(demo.bootstrap)
    try:
        created = session.execute_one(CREATE)
        demo.check("created" in created.text, created.text)
        streams = session.execute_one("SHOW STREAMS")
        demo.check([r[0] for r in streams.rows] == ["access"], "SHOW STREAMS lists it")
        described = session.execute_one("DESCRIBE access")
        _table(demo, described.columns, described.rows[:8])

        spark = session.spark
        static = al.parse(spark.createDataFrame([(line.encode(),) for line in lines], "value binary"))
        for title, query, pipeline, width in (
                ("requests per minute", PER_MINUTE, al.requests_per_minute, (0, 2, 4)),
                ("unique clients per hour", PER_HOUR, al.unique_users_per_hour, (0, 2, 3))):
            say(f"[bold]3.[/] push query: {title}, until it has read all {LINES} lines")
            say(query.format(n=LINES), style="cyan", markup=False, highlight=False)
            push = session.execute_one(query.format(n=LINES))
            latest = {}
            for row in push.rows:
                latest[row[0]] = row[1:]
            rows = sorted((k, *v) for k, v in latest.items())
            _table(demo, push.columns, rows[-5:])
            expected = {r[width[0]]: (r[width[1]], r[width[2]]) for r in pipeline(static).collect()}
            demo.check(latest == expected, f"{len(latest)} windows, each equal to the Python pipeline's "
                                           f"({pipeline.__name__}) on the same lines")

        say("[bold]4.[/] EXPLAIN: the plan Spark runs")
        plan = session.execute_one("EXPLAIN SELECT path, count(*) FROM access GROUP BY path EMIT CHANGES")
        text = plan.rows[0][0]
        say("\n".join(text.splitlines()[:4]) + "\n  ...", markup=False, highlight=False)
        demo.check("Aggregate" in text and "EventTimeWatermark" in text, "an aggregation over the watermarked stream")

        say("[bold]5.[/] a mistake (a column misspelt on line 3)")
        say(MISTAKE, style="cyan", markup=False, highlight=False)
        try:
            list(session.execute(MISTAKE))
            demo.check(False, "the mistake was refused")
        except SqlError as e:
            say(f"error: {e}", style="red", markup=False, highlight=False)
            demo.check(e.line == 3 and "pth" in e.message and not spark.streams.active,
                       "one line, at line 3, and no query started")
    finally:
        session.close()

    say("[bold]6.[/] a new session finds the stream where it was declared: in the broker (__freshet_sql)")
    again = SqlSession(demo.bootstrap, spark)
    try:
        streams = again.execute_one("SHOW STREAMS")
        demo.check([r[0] for r in streams.rows] == ["access"], "SHOW STREAMS in a new session lists access")
    finally:
        again.close()


def _table(demo: Demo, columns: list[str], rows: list) -> None:
    table = Table(*columns)
    for row in rows:
        table.add_row(*("" if v is None else escape(str(v)) for v in row))
    demo.console.print(table)
