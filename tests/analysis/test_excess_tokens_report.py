"""The report counts records flagged with more tokens than allowed (``excess_tokens``)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.report import build_report
from loadgen.records import RequestRecord
from loadgen.runformat.layout import (
    CASE_FILE,
    REPORT_MD,
    REQUESTS_FILE,
    case_dir,
    read_json,
    write_json,
)
from loadgen.runformat.rows import excess_tokens
from tests.support.synthetic_run import CONTROL_CASE, ITL_NS, MS, TEST_CASE, build_run


def test_records_with_excess_tokens_are_counted_in_the_case_line(tmp_path: Path) -> None:
    build_run(tmp_path)
    path = case_dir(tmp_path, TEST_CASE) / REQUESTS_FILE
    lines = path.read_text().splitlines()
    rows = [msgspec.json.decode(line, type=RequestRecord) for line in lines]
    # Two requests of the tested case got 8 one-token chunks, and a usage of 8, for a
    # max_tokens of 4: the client records them as errors, 4 tokens over each, as it would
    # (the records stay true: the integrity rule checks excess_tokens against them).
    for r in (rows[0], rows[3]):
        r.chunk_ns += [r.chunk_ns[-1] + k * ITL_NS for k in range(1, 5)]
        r.chunk_tokens += [1] * 4
        r.end_ns = r.chunk_ns[-1] + MS
        r.usage_completion_tokens = 8
        r.status, r.error = "error", "usage.completion_tokens=8, max_tokens=4 asked with ignore_eos"
        r.excess_tokens = excess_tokens(r)
    assert rows[0].excess_tokens == rows[3].excess_tokens == 4
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    info = read_json(case_dir(tmp_path, TEST_CASE) / CASE_FILE)
    write_json(case_dir(tmp_path, TEST_CASE) / CASE_FILE, info | {"failed_requests": 2})
    report = build_report(tmp_path).as_dict()
    assert report["cases"][TEST_CASE]["requests_excess_tokens"] == 2
    assert report["cases"][CONTROL_CASE]["requests_excess_tokens"] == 0
    md = (tmp_path / REPORT_MD).read_text()
    total = len(rows)
    assert f"requests {total}, failed 2, 2 with more tokens than allowed; scrapes" in md
    assert md.count("with more tokens than allowed") == 1  # the control case has none
