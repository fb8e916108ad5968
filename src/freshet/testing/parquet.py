"""Reading what Spark's file sink committed, without Spark: the files its ``_spark_metadata`` log lists.

A driver killed mid-batch can leave a file the log never committed (an orphan, even a 0-byte one), so a
glob over the directory is wrong; the log is what Spark itself reads. Its entries are files named by
batch id (``N``, or ``N.compact`` every few batches, holding everything up to N), each ``v1`` then one
JSON line per file with ``"action": "add"`` or ``"delete"``.
"""

from __future__ import annotations

import datetime
import json
import os
from types import SimpleNamespace


def committed_files(path: str) -> list[str]:
    log_dir = os.path.join(path, "_spark_metadata")
    entries = {}
    for name in os.listdir(log_dir):
        base = name.removesuffix(".compact")
        if base.isdigit():
            entries[int(base)] = name
    compacts = [n for n, name in entries.items() if name.endswith(".compact")]
    start = max(compacts, default=-1)
    files: dict[str, bool] = {}
    for n in sorted(n for n in entries if n >= start):
        with open(os.path.join(log_dir, entries[n])) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:  # the first line is the log's version
            entry = json.loads(line)
            files[entry["path"]] = entry["action"] == "add"
    return [p.removeprefix("file://") for p, added in files.items() if added]


def _naive_utc(value):
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value


def committed_rows(path: str) -> list[SimpleNamespace]:
    """Every row of the committed files, as objects with a field per column (like Spark's Rows);
    timestamps as naive UTC datetimes, as a UTC Spark session collects them."""
    import pyarrow.parquet as pq

    rows = []
    for file in committed_files(path):
        for row in pq.read_table(file).to_pylist():
            rows.append(SimpleNamespace(**{k: _naive_utc(v) for k, v in row.items()}))
    return rows
