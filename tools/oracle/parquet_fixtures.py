#!/usr/bin/env python3
"""Writes Parquet fixtures with pyarrow (the writer behind most dataset files on the Hub:
`datasets`' push_to_hub and the Hub's Parquet conversion) for tests/unit/test_parquet.cpp, which
reads every file of every folder under tests/fixtures/parquet/ that has an expected.json and
requires identical rows.

    python3 tools/oracle/parquet_fixtures.py tests/fixtures/parquet/pyarrow

Variants: compression none / snappy / gzip / zstd x dictionary on / off (plain) x data page
version 1.0 / 2.0, plus one file written the way `datasets` writes a split (row groups of 100,
dictionary + snappy, "messages" as list<struct<role, content>>). Columns: int64 id, strings with
unicode / empty / null, prompt/completion, messages (nullable list of nullable structs), tags
(list<string>), double and bool with nulls. Rows cross pages (small data_page_size) and row groups.
expected.json holds {"writer", "files", "rows"}, the rows as pyarrow's to_pylist() gives them, so
the expected values come from pyarrow reading its own files, not from this script's inputs alone.
A rerun with the same pyarrow version writes the same bytes.
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def rows():
    seed = 12345

    def rand(n):
        nonlocal seed
        seed = (seed * 1103515245 + 12345) % 2147483648
        return seed % n

    words = ["alpha", "beta", "gamma", "δέλτα", "数据", "emoji 🙂", "", "tab\there", 'quote "x"', "line\nbreak"]
    out = []
    for i in range(257):
        text = " ".join(words[rand(len(words))] for _ in range(1 + rand(12))) + ("x" * 700 if i % 50 == 7 else "")
        turns = rand(4)
        messages = None if i % 31 == 5 else [
            {"role": "user" if t % 2 == 0 else "assistant",
             "content": None if (t == 1 and i % 9 == 0) else f"{words[rand(len(words))]} #{i}.{t}"}
            for t in range(turns)]
        out.append({
            "id": i * 1000003 - 500000,
            "text": text,
            "prompt": None if i % 13 == 3 else f"Q{i % 17}: {words[rand(len(words))]}?",
            "completion": f"A{i}",
            "messages": messages,
            "tags": None if i % 7 == 0 else [words[rand(4)] for _ in range(rand(3))],
            "score": None if i % 11 == 0 else i * 0.37 - 20.125,
            "flag": None if i % 5 == 2 else i % 3 == 0,
        })
    return out


SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("text", pa.string()),
    ("prompt", pa.string()),
    ("completion", pa.string()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("tags", pa.list_(pa.string())),
    ("score", pa.float64()),
    ("flag", pa.bool_()),
])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    table = pa.Table.from_pylist(rows(), schema=SCHEMA)
    files = []
    for codec in ("none", "snappy", "gzip", "zstd"):
        for dictionary in (True, False):
            for version in ("1.0", "2.0"):
                name = f"pyarrow_{codec}_{'dict' if dictionary else 'plain'}_v{version[0]}.parquet"
                pq.write_table(table, os.path.join(out, name), compression=codec, use_dictionary=dictionary,
                               data_page_version=version, row_group_size=100, data_page_size=600,
                               write_statistics=False)
                files.append(name)
    # As `datasets` writes a split: data/train-00000-of-00001.parquet with its defaults.
    pq.write_table(table, os.path.join(out, "pyarrow_datasets_style.parquet"), row_group_size=100)
    files.append("pyarrow_datasets_style.parquet")
    expected = None
    for f in files:  # every file must read back identically in pyarrow itself
        got = pq.read_table(os.path.join(out, f)).to_pylist()
        if expected is None:
            expected = got
        elif got != expected:
            sys.exit(f"pyarrow reads {f} differently from {files[0]}")
    with open(os.path.join(out, "expected.json"), "w") as fh:
        json.dump({"writer": f"pyarrow {pa.__version__}", "files": files, "rows": expected}, fh, ensure_ascii=False)
        fh.write("\n")
    print(f"wrote {len(files)} files and expected.json to {out} (pyarrow {pa.__version__})")


if __name__ == "__main__":
    main()
