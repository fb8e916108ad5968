"""Every demo's numbers checked before anything starts: a number its story cannot be told with is a one-line usage
error and exit 1 (was: `demo enrollment --students -3` a KeyError traceback after a broker had started;
`demo redelivery --jobs 1` a failed step)."""

from unittest import mock

import pytest


@pytest.mark.parametrize("demo, option, value", [
    ("enrollment", "--students", "-3"), ("enrollment", "--students", "2"), ("enrollment", "--clients", "0"),
    ("redelivery", "--jobs", "1"), ("redelivery", "--work-ms", "-1"),
    ("dual-writes", "--keys", "0"), ("dual-writes", "--rounds", "0"),
    ("intrusion", "--events", "-1"), ("intrusion", "--attacks", "0"), ("alerts", "--listings", "0"),
])
def test_a_number_the_story_cannot_be_told_with_is_one_line_and_exit_1(demo, option, value, capsys):
    from freshet.cli.main import main

    with mock.patch("freshet.cli.demos.preamble.Demo.__enter__", side_effect=AssertionError("a demo started")), \
            mock.patch("sys.argv", ["freshet", "demo", demo, option, value]), pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"freshet demo {demo}: invalid value for '{option}'"), err
    assert err.count("\n") == 1, err
