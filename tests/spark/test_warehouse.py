"""CDC change topics into a Parquet warehouse with Spark, queried with DuckDB: equal to the source table."""

import uuid

from freshet.cdc.postgres import CdcConfig
from freshet.pipelines.warehouse import current_table, start
from freshet.testing.cdc import run_connector, source_state


def test_warehouse_equals_the_source_table(spark, broker, postgres, db, tmp_path):
    """Under load (average 10-18 on 2 cores) this failed once with "Python worker failed to connect back"
    (issue #45), from Spark, not from Freshet: each start of a query on the ``freshet`` source (a Python streaming
    data source) has the driver start a Python process for the source's planning (offsets, partitions, commits),
    and Spark 4.3.0 starts that one with ``PythonWorkerFactory.createSimpleWorker`` (the daemon is turned off
    for it in ``PythonStreamingSourceRunner``, whatever ``spark.python.use.daemon`` says), which waits a fixed
    10 s for the new interpreter to connect back. That interpreter imports pyspark's streaming runner (pyarrow,
    pandas) before connecting: 2.4-3.1 s at load 12-17 here, past 10 s when the machine is busier. No setting
    changes the 10 s or the path: the shared session already runs with Spark's defaults
    ``spark.python.use.daemon`` and ``spark.python.worker.reuse`` true (executor tasks fork from the daemon
    and are reused), and Unix domain sockets change how the worker connects, not how long it may take. So the
    test is left as it is: such a failure is the machine's load, and this test starts the query twice."""
    conn, schema = db
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, customer text, total numeric(10,2))")
    cur.execute(f"INSERT INTO {schema}.orders SELECT g, 'c' || (g % 7), g * 2.5 FROM generate_series(1, 400) g")
    prefix = "w" + uuid.uuid4().hex[:6]

    def changes():
        cur.execute(f"UPDATE {schema}.orders SET total = total + 1 WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {schema}.orders WHERE id % 10 = 0")
        cur.execute(f"INSERT INTO {schema}.orders VALUES (1000, 'late', 9.99)")

    run_connector(CdcConfig(postgres.dsn, [f"{schema}.orders"], prefix, broker.bootstrap,
                            slot="s" + uuid.uuid4().hex[:8], publication="p" + uuid.uuid4().hex[:8]),
                  changes, changes=400 // 3 + 40 + 1)
    topic = f"{prefix}.{schema}.orders"
    path = str(tmp_path / "warehouse")
    for _ in range(2):  # a second run on the same checkpoint adds nothing
        query = start(spark, broker.bootstrap, [topic], path, str(tmp_path / "ck"), available_now=True)
        query.awaitTermination(300)
        assert query.exception() is None
    assert current_table(path, topic) == source_state(postgres.dsn, f"{schema}.orders", ["id"])
    assert spark.read.parquet(path).count() == 400 + 400 // 3 + 40 + 1
