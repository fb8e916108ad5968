"""``freshet watch add --file``: many stored queries at once, every line checked before any is stored."""

from freshet.client.stored import WATCHES_TOPIC, StoredDefinitions
from freshet.testing.cli import freshet, one_line_error


def stored(broker) -> dict:
    return {name: d["text"] for name, d in StoredDefinitions(broker.bootstrap, WATCHES_TOPIC).refresh().items()}


def test_watch_add_file_stores_every_query_of_the_file(broker, topic_name, tmp_path):
    prefix = topic_name[-20:]
    queries = tmp_path / "queries.txt"
    queries.write_text(f"# searches for houses\n"
                       f"{prefix}-anna\tcity = Delft AND price < 400000\n"
                       "\n"
                       f"{prefix}-ben\t\"canal view\" AND NOT leasehold\n"
                       f"bedrooms >= 5 AND city IN (Utrecht, Leiden) AND title:{prefix}\n")
    added = freshet(broker, "watch", "add", "--file", queries)
    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == f"added {prefix}-anna: city = Delft AND price < 400000"
    derived = lines[2].split()[1].rstrip(":")
    assert derived.startswith("q-")
    now = stored(broker)
    assert now[f"{prefix}-anna"] == "city = Delft AND price < 400000"
    assert now[f"{prefix}-ben"] == '"canal view" AND NOT leasehold'
    assert now[derived] == f"bedrooms >= 5 AND city IN (Utrecht, Leiden) AND title:{prefix}"
    # the same id as `freshet watch add QUERY` gives that query
    one = freshet(broker, "watch", "add", f"bedrooms >= 5 AND city IN (Utrecht, Leiden) AND title:{prefix}")
    assert one.stdout.split()[1].rstrip(":") == derived

    from_stdin = freshet(broker, "watch", "add", "--file", "-", input=f"{prefix}-cas\thouseboat\n")
    assert from_stdin.returncode == 0 and stored(broker)[f"{prefix}-cas"] == "houseboat"


def test_a_bad_line_names_its_number_and_reason_and_nothing_of_the_file_is_stored(broker, topic_name, tmp_path):
    prefix = topic_name[-20:]
    before = stored(broker)
    cases = {
        "bad query": (f"{prefix}-a\tcity = Delft\n{prefix}-b\tprice <\n", ":2: query: expected a value"),
        "bad id": (f"{prefix}-a\tcity = Delft\n\n# x\nno spaces!\thouseboat\n", ":4: id 'no spaces!': letters"),
        "twice": (f"{prefix}-a\tcity = Delft\n{prefix}-a\tcity = Leiden\n", f":2: id {prefix}-a is on line 1 too"),
        "empty": ("# only a comment\n\n", "no query in"),
        "not text": (b"\xff\xfe city\n", "not UTF-8 text"),
    }
    for name, (content, said) in cases.items():
        path = tmp_path / f"{name}.txt"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        line = one_line_error(freshet(broker, "watch", "add", "--file", path), said)
        assert str(path) in line, line
    one_line_error(freshet(broker, "watch", "add", "--file", tmp_path / "missing.txt"), "cannot read",
                   "No such file")
    one_line_error(freshet(broker, "watch", "add", "--file", "-", input="city = \n"), "stdin:1: query:")
    one_line_error(freshet(broker, "watch", "add", "houseboat", "--file", tmp_path / "twice.txt"), "--file")
    one_line_error(freshet(broker, "watch", "add", "--id", "x", "--file", tmp_path / "twice.txt"), "--file")
    one_line_error(freshet(broker, "watch", "add"), "give a QUERY")
    assert stored(broker) == before  # not one query of any of these files
