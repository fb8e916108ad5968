"""freshet demo redelivery's figures read as a person writes them."""

from freshet.cli.demos.redelivery import span


def test_a_span_whose_ends_read_the_same_is_one_figure():
    assert span(180, 180) == "180"  # was "180-180 later jobs"
    assert span(2.01, 2.04, ".1f") == "2.0"
    assert span(170, 180) == "170-180"
    assert span(2.0, 2.2, ".1f") == "2.0-2.2"
