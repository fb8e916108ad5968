"""`freshet sql`: the prompt driven through a pty as a user types, -f and -e, one-line errors and exit 1."""

from freshet.testing.cli import freshet, one_line_error

from .helpers import produce, sql_in_a_pty

T0 = 1_767_225_600_000


def test_the_prompt_runs_a_push_query_until_its_limit_or_ctrl_c_and_comes_back(broker, topic_name, tmp_path):
    values = [{"user_id": f"u{i % 2}", "n": i, "ts": T0 + i * 1000} for i in range(10)]
    produce(broker.bootstrap, topic_name, values)
    name = f"pty_{abs(hash(topic_name)) % 10**8}"
    with sql_in_a_pty(broker, tmp_path) as child:
        child.expect_exact("freshet> ")
        # a statement over two lines: the prompt waits for the ;
        child.sendline(f"CREATE STREAM {name} (user_id STRING, n INT, ts BIGINT)")
        child.expect_exact("      > ")
        child.sendline(f"  WITH (topic='{topic_name}', format='json', timestamp='ts');")
        child.expect_exact(f"Stream {name} created over topic {topic_name}")
        child.expect_exact("freshet> ")
        child.sendline(f"SELECT user_id, n FROM {name} WHERE n >= 4 EMIT CHANGES LIMIT 3;")
        child.expect(r"\|user_id\s*\|n\s*\|")
        rows = []
        for _ in range(3):
            child.expect(r"\|(u\d)\s*\|(\d+)\s*\|")
            rows.append((child.match.group(1), int(child.match.group(2))))
        child.expect_exact("Limit reached")
        child.expect_exact("freshet> ")
        assert len(set(rows)) == 3 and all(n >= 4 and user == f"u{n % 2}" for user, n in rows)
        child.sendline("SELECT nope FROM " + name + " EMIT CHANGES;")
        child.expect(r"error: line 1, column 8: .*`nope` cannot be resolved")
        child.expect_exact("freshet> ")
        # no stop condition: rows until Ctrl-C, then the prompt again
        child.sendline(f"SELECT n FROM {name} EMIT CHANGES;")
        child.expect(r"\|9\s*\|")
        child.sendintr()
        child.expect_exact("Query terminated")
        child.expect_exact("freshet> ")
        child.sendeof()


def test_a_file_with_a_syntax_error_runs_nothing_and_names_line_and_column(broker, tmp_path):
    script = tmp_path / "bad.sql"
    script.write_text("SHOW STREAMS;\n\nSELECT * FROM s EMIT CHANGES LIMIT ten;\n")
    run = freshet(broker, "sql", "-f", str(script))
    one_line_error(run, "line 3, column 36", "expected a number of rows after LIMIT")
    assert run.stdout == ""  # SHOW STREAMS did not run either: the whole file is read first


def test_execute_shows_streams_and_refuses_an_unknown_topic(broker, topic_name):
    run = freshet(broker, "sql", "-e", f"CREATE STREAM x (a INT) WITH (topic='{topic_name}', format='json')")
    one_line_error(run, f"topic '{topic_name}' does not exist")
    shown = freshet(broker, "sql", "-e", "SHOW TOPICS")
    assert shown.returncode == 0, shown.stderr
    assert "topic" in shown.stdout and "row" in shown.stdout


def test_a_syntax_error_is_one_line_before_spark_or_the_broker_is_asked(monkeypatch, tmp_path, capfd):
    """-e, -f and the prompt: a statement Spark cannot parse is found before a SparkSession is asked for (and, for
    -e and -f, before the broker is: an unreachable one changes nothing); in-process, no JVM."""
    import subprocess

    from click.testing import CliRunner

    import freshet.spark
    from freshet.cli.sql_cmd import sql

    asked = []

    def no_spark(*args, **kwargs):
        asked.append(args)
        raise RuntimeError("a SparkSession was asked for")

    monkeypatch.setattr(freshet.spark, "session", no_spark)
    nowhere = ["--bootstrap", "127.0.0.1:1", "--spark-log", str(tmp_path / "spark.log")]
    script = tmp_path / "typo.sql"
    script.write_text("SHOW STREAMS;\n\n  SELECT count(*) FROM t;\nSELEC 1;\n")
    for args, where in ((["-e", "SELEC 1"], "line 1, column 1"), (["-f", str(script)], "line 4, column 1"),
                        (["-e", "SHOW STREAMS; SELECT count(* FROM t"], "line 1, column 27")):
        run = CliRunner().invoke(sql, [*args, *nowhere])
        line = one_line_error(subprocess.CompletedProcess(args, run.exit_code, run.stdout, run.stderr), where)
        assert run.stdout == ""  # the statements before it did not run either
        assert ("syntax error at or near 'SELEC': no statement starts with it (did you mean SELECT?)" in line
                or "the ( opened here is never closed" in line), line
    capfd.readouterr()
    run = CliRunner().invoke(sql, nowhere, input="SELEC 1;\nCREATE TABLE t AS\n  SELECT a) FROM s GROUP BY a;\n")
    assert run.exit_code == 0, run.output
    said = capfd.readouterr().err.strip().splitlines()  # the prompt writes its errors to the terminal's stderr
    assert said == ["error: line 1, column 1: syntax error at or near 'SELEC': no statement starts with it "
                    "(did you mean SELECT?)",
                    "error: line 2, column 11: syntax error at or near ')': it closes nothing"], said
    assert run.stdout.count("freshet> ") == 3  # the prompt came back after each
    assert asked == []
