"""One check of a written page in headless Chromium, for every test that has a run or a
comparison: the fast tier's synthetic runs and each real-vLLM scenario test.

:func:`check_report_page` and :func:`check_compare_page` open the page with the network off
(``tests.support.browser``) and assert what a reader relies on: no console error and no
request, the headline and every verdict in the page's text, every figure drawn; the
screenshots stay in ``out_dir`` (the test's own output directory). Without Chromium they skip,
saying why (``make test`` installs it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.browser import PageView, find_chromium, open_page

#: Fewest drawn elements (paths, markers, texts) a figure with axes, ticks and data has.
MIN_FIGURE_ELEMENTS = 20


def _words(text: str) -> str:
    return " ".join(text.split())


def open_or_skip(page: Path, out_dir: Path, script: str | None = None) -> PageView:
    """``open_page`` on ``page``; skips the test (with the reason) when Chromium is missing."""
    if find_chromium() is None:
        pytest.skip("chromium is not installed: `make test` installs Debian's chromium "
                    "(apt-get install chromium), or set CHROMIUM to a Chromium binary")  # fmt: skip
    assert page.exists(), f"{page} was not written"
    return open_page(page, out_dir, script=script)


def _check_view(view: PageView, headline: str, verdicts: list[str], figures: int) -> None:
    assert view.errors == [], view.errors
    assert view.requests == [], view.requests
    text = _words(view.text)
    assert _words(headline) in text
    missing = [v for v in verdicts if _words(v) not in text]
    assert not missing, missing
    assert len(view.figures) == figures, view.figures
    empty = [
        f for f in view.figures
        if min(f["width"], f["height"]) <= 0 or f["elements"] < MIN_FIGURE_ELEMENTS
    ]  # fmt: skip
    assert not empty, empty
    for shot in view.screenshots.values():
        assert shot.stat().st_size > 10_000, shot  # a blank page is a few hundred bytes


def check_report_page(run_dir: Path, out_dir: Path) -> PageView:
    """Open ``run_dir``'s report.html and check it against its report.json: the headline
    (verdict counts), each verdict's case, check and detail, one drawn figure per plot."""
    report = json.loads((run_dir / "report.json").read_text())
    s = report["verdict_summary"]
    headline = f"{s['passed']} passed, {s['failed']} failed, {s['undecided']} undecided."
    verdicts = [f"{v['case']} {v['check']} {v['detail']}" for v in report["verdicts"]]
    view = open_or_skip(run_dir / "report.html", out_dir)
    _check_view(view, headline, verdicts, len(report["plots"]))
    return view


def check_compare_page(out: Path, out_dir: Path) -> PageView:
    """Open a comparison's compare.html and check it against its compare.json: the
    decision's headline, each verdict comparison, one drawn figure per case pair."""
    data = json.loads((out / "compare.json").read_text())
    verdicts = [f"{v['check']} {v['baseline']} {v['candidate']}" for v in data["verdicts"]]
    view = open_or_skip(out / "compare.html", out_dir)
    _check_view(view, data["decision"]["line"], verdicts, len(data["pairs"]))
    return view
