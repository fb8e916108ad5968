"""`freshet sql --remote` checked as `freshet run --remote` is (the push queries over a real Spark Connect server
are in tests/spark/test_sql_remote.py, on the shared Spark cluster's server)."""

from freshet.testing.cli import freshet, one_line_error


def test_a_wrong_or_unreachable_remote_is_one_line():
    for url, says in (("http://x:1", "--remote must be sc://HOST:PORT"),
                      ("sc://127.0.0.1:1", "cannot reach the Spark Connect server at 127.0.0.1:1")):
        one_line_error(freshet("sql", "--remote", url, "-e", "SELECT 1", bootstrap=False, timeout=120), says)
