"""Expressions that read one row instead of listing the rows (FIRST, LAST, a variable's field) against what the
definition says: the aggregate over every row ``Frame.rows_of`` lists, the field of ``Frame.last_of``'s row.
The matcher's tests cannot tell (the reference matcher evaluates with the same closures)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from freshet.cep.expressions import Frame, _aggregate, compile_expression, get_path, parse_expression

VARIABLES = frozenset({"A", "B"})

row = st.fixed_dictionaries({}, optional={
    "x": st.sampled_from([1, 2, None, "a", [1]]),
    "o": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"y": st.integers(0, 2)}))})


@st.composite
def frames(draw):
    rows = draw(st.lists(row, min_size=1, max_size=8))
    start = draw(st.integers(0, len(rows) - 1))
    labels = draw(st.lists(st.sampled_from(["A", "B"]), max_size=len(rows) - start))
    current = None
    var = None
    if start + len(labels) < len(rows) and draw(st.booleans()):
        current, var = start + len(labels), draw(st.sampled_from(["A", "B"]))
    return Frame(rows, start, labels, current, var)


@settings(max_examples=300, deadline=None)
@given(frames(), st.sampled_from(["FIRST", "LAST"]), st.sampled_from([None, "A", "B"]), st.sampled_from(["x", "o.y"]))
@example(Frame([{"x": 1}, {"x": 2}, {"x": 3}], 0, ["B", "A"], None, None), "FIRST", "A", "x")
@example(Frame([{"x": 1}, {"x": 2}, {"x": 3}], 0, ["A", "A"], 2, "B"), "FIRST", "B", "x")
@example(Frame([{"x": 1}, {"x": 2}, {"x": 3}], 1, [], 1, "B"), "FIRST", None, "x")
@example(Frame([{"x": 1}, {"x": 2}, {"x": 3}], 0, ["A", "B"], 2, "B"), "LAST", "A", "x")
def test_first_and_last_are_the_aggregate_over_the_rows(frame, function, var, field):
    text = f"{function}({var + '.' if var else ''}{field})"
    path = tuple(field.split("."))
    expected = _aggregate(function, [get_path(r, path) for r in frame.rows_of(var)], False)
    assert compile_expression(parse_expression(text, VARIABLES))(frame) == expected


@settings(max_examples=200, deadline=None)
@given(frames(), st.sampled_from(["A", "B"]), st.sampled_from(["x", "o.y", "o"]))
def test_a_variables_field_is_the_field_of_its_last_row(frame, var, field):
    expected = get_path(frame.last_of(var), tuple(field.split(".")))
    assert compile_expression(parse_expression(f"{var}.{field}", VARIABLES))(frame) == expected
