"""A process running freshet sql's persistent queries, for kill -9 tests: runs SCRIPT (CREATE STREAM
and CREATE ... AS SELECT statements), then keeps them running (`freshet sql --serve` restarts them). Its
SparkSession has one shuffle partition: one state store for a windowed count, in the checkpoint for good.

usage: persistent_driver.py BOOTSTRAP SCRIPT   (FRESHET_DATA_DIR: where checkpoints and table copies go)
"""

import sys

from freshet.spark import session
from freshet.sql import queries
from freshet.sql.session import SqlSession


def main() -> None:
    bootstrap = sys.argv[1]
    sql = SqlSession(bootstrap, spark_factory=lambda: session("sql-kill-test", shuffle_partitions=1))
    for result in sql.execute(sys.argv[2]):
        print(getattr(result, "text", result), flush=True)
    print("STARTED", flush=True)
    queries.wait(sql)


if __name__ == "__main__":
    main()
