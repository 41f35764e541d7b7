"""The report counts records flagged with more tokens than allowed (``excess_tokens``)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.report import build_report
from loadgen.records import RequestRecord
from loadgen.runformat.layout import REPORT_MD, REQUESTS_FILE, case_dir
from tests.support.synthetic_run import CONTROL_CASE, TEST_CASE, build_run


def test_records_with_excess_tokens_are_counted_in_the_case_line(tmp_path: Path) -> None:
    build_run(tmp_path)
    path = case_dir(tmp_path, TEST_CASE) / REQUESTS_FILE
    lines = path.read_text().splitlines()
    rows = [msgspec.json.decode(line, type=RequestRecord) for line in lines]
    # Two records of the tested case said 20 tokens for a max_tokens of 16: 4 over each.
    rows[0].excess_tokens = rows[3].excess_tokens = 4
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    report = build_report(tmp_path).as_dict()
    assert report["cases"][TEST_CASE]["requests_excess_tokens"] == 2
    assert report["cases"][CONTROL_CASE]["requests_excess_tokens"] == 0
    md = (tmp_path / REPORT_MD).read_text()
    total = len(rows)
    assert f"requests {total}, failed 0, 2 with more tokens than allowed; scrapes" in md
    assert md.count("with more tokens than allowed") == 1  # the control case has none
