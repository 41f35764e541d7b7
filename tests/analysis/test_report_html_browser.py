"""report.html of the synthetic run in headless Chromium (network off): what a reader sees.

Skipped, saying so, where Chromium is not installed (``make test`` installs Debian's).
"""

from __future__ import annotations

from pathlib import Path

from analysis.report import build_report
from tests.support.page_checks import check_report_page, open_or_skip
from tests.support.synthetic_run import TEST_CASE, build_run

#: Click the TTFT mean header of the first case's phase table twice; the column each time.
_SORT = """(() => {
  const table = document.querySelector("#case-%s table");
  const col = Array.from(table.tHead.rows[0].cells).findIndex(c => c.textContent === "TTFT mean");
  const column = () => Array.from(table.tBodies[0].rows).map(r => r.cells[col].textContent);
  const th = table.tHead.rows[0].cells[col];
  th.click();
  const up = column();
  th.click();
  return {up: up, down: column(), sort: th.getAttribute("aria-sort")};
})()"""


def test_the_page_opens_offline_with_every_verdict_and_figure(tmp_path: Path) -> None:
    run = tmp_path / "run"
    build_run(run)
    build_report(run)
    view = check_report_page(run, tmp_path / "screenshots")
    assert view.screenshots["top"].exists() and view.screenshots["full"].exists()
    # Hover texts are in the page: one per request on each latency panel of both cases.
    assert sum("· phase cold · TTFT" in t for t in view.titles) == 2 * 2 * 6


def test_a_table_sorts_by_the_clicked_column_as_numbers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    build_run(run)
    build_report(run)
    view = open_or_skip(run / "report.html", tmp_path, script=_SORT % TEST_CASE)
    # TTFT means per phase (synthetic run): cold 2 misses of 80 + 4 hits of 20 = 40.0, warm
    # and rewarm 20.0, pollution 80.0, revisit 40.0.
    assert view.result["up"] == ["20.0", "20.0", "40.0", "40.0", "80.0"]
    assert view.result["down"] == ["80.0", "40.0", "40.0", "20.0", "20.0"]
    assert view.result["sort"] == "descending"
    assert view.errors == []
