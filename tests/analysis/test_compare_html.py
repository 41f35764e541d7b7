"""compare.html of ``loadgen compare`` on synthetic runs: self-contained, the gate's headline
and every verdict first, each case's metrics with its ratio plot, hover texts, rebuilt
byte-identically; and the same page in headless Chromium with the network off.

The candidate is the synthetic run with every request's token stamps stretched 2× from its
send (``_slow_down``): TTFT and TPOT double, so the latency metrics regress (exit code 1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.html.page import CSP
from loadgen.cli import main
from tests.analysis.test_compare_runs import SMALL_GATE, _reseal, _slow_down, build_run
from tests.analysis.test_report_html import _OUTSIDE
from tests.support.page_checks import check_compare_page
from tests.support.synthetic_run import CONTROL_CASE, TEST_CASE


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("compare")
    build_run(root / "base")
    build_run(root / "cand")
    _slow_down(root / "cand", 2.0)
    _reseal(root / "cand")
    (root / "gate.toml").write_text(SMALL_GATE)
    args = ["compare", str(root / "base"), str(root / "cand"), "--gate", str(root / "gate.toml")]
    result = CliRunner().invoke(main, [*args, "--out", str(root / "out")])
    assert result.exit_code == 1, result.output
    again = CliRunner().invoke(main, [*args, "--out", str(root / "again")])
    assert again.exit_code == 1, again.output
    return root / "out", root / "again", result.output


def test_the_page_is_one_file_with_the_headline_and_verdicts_first(
    compared: tuple[Path, Path, str],
) -> None:
    out, _, output = compared
    page = (out / "compare.html").read_text()
    data = json.loads((out / "compare.json").read_text())
    assert _OUTSIDE.findall(page) == [] and "<img" not in page and CSP in page
    assert f"compare: {(out / 'compare.html').resolve().as_uri()}" in output
    headline = page.index(f'<div class="headline fail" id="headline"><strong>'
                          f'{data["decision"]["line"]}</strong> (exit code 1)')  # fmt: skip
    assert data["decision"]["line"].startswith("REGRESSION")
    verdicts = page.index('<section id="verdicts">')
    first_case = page.index(f'<section id="case-{TEST_CASE}">')
    assert headline < verdicts < first_case
    for v in data["verdicts"]:
        assert f"<td>{v['check']}</td>\n<td>{v['baseline']}</td>" in page[verdicts:first_case]
    # One ratio plot per case pair, inline, in its case's section.
    assert page.count("<svg ") == 2
    case = page[first_case : page.index(f'<section id="case-{CONTROL_CASE}">')]
    assert f'id="fig-compare_{TEST_CASE}"' in case


def test_each_metric_says_its_change_on_hover(compared: tuple[Path, Path, str]) -> None:
    out, _, _ = compared
    svg = (out / "plots" / f"compare_{TEST_CASE}.svg").read_text()
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    # Stretching every stamp 2× from the send doubles each request's TTFT: ratio 2.000×.
    # Tolerance: gate_defaults.toml's 0.15 for ttft_ms.
    assert "warm ttft_ms mean: 2.000×, interval [2.000, 2.000], tolerance ±15 %: regression" in (
        titles
    )


def test_the_page_is_byte_identical_when_compared_again(compared: tuple[Path, Path, str]) -> None:
    out, again, _ = compared
    assert (again / "compare.html").read_bytes() == (out / "compare.html").read_bytes()


def test_the_page_opens_offline_with_the_headline_verdicts_and_plots(
    compared: tuple[Path, Path, str], tmp_path: Path
) -> None:
    out, _, _ = compared
    view = check_compare_page(out, tmp_path)
    assert any("ttft_ms mean: 2.000×" in t for t in view.titles)
