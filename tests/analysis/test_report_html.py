"""report.html on the synthetic run: self-contained, verdicts first, same figures, hover texts.

Numbers come from ``tests/support/synthetic_run`` (its docstring): a probe that misses has a
TTFT of 80 ms, one that hits 20 ms; 4 tokens 10 ms apart, so E2EL = TTFT + 30 ms.
"""

from __future__ import annotations

import html
import re
import shutil
import webbrowser
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.html.page import CSP, SCRIPT, markdown_html
from analysis.html.report_page import report_page
from analysis.markdown import report_sections
from analysis.models import Verdict
from analysis.report import build_report
from loadgen.cli import main
from loadgen.runformat.layout import REPORT_HTML
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import CONTROL_CASE, TEST_CASE, Options, build_run

#: Anything that would make the page fetch or link out: a URL in src/href, a stylesheet or
#: script from a file, a CSS import or url() that is not data:.
_OUTSIDE = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)|<link[^>]+stylesheet|<script[^>]+src="""
    r"""|@import|url\((?!#|data:)""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    build_run(run_dir)
    build_report(run_dir)
    # Sealed as `loadgen run` seals it: a rebuild then finds nothing new to record.
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    return run_dir


def test_the_page_is_one_file_that_loads_nothing(run: Path) -> None:
    page = (run / REPORT_HTML).read_text()
    assert _OUTSIDE.findall(page) == []
    assert "<img" not in page
    # The browser itself refuses any fetch: no source allowed but the page's own.
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    assert "default-src 'none'" in CSP
    assert page.count("<svg ") == 6  # every plot of report.json, inline
    assert page.count("<script>") == 1 and SCRIPT in page


def test_headline_and_every_verdict_come_first(run: Path) -> None:
    page = (run / REPORT_HTML).read_text()
    summary = build_report(run).summary
    headline = page.index('<div class="headline pass" id="headline"><strong>11 passed, 0 failed')
    verdicts = page.index('<section id="verdicts">')
    first_case = page.index(f'<section id="case-{TEST_CASE}">')
    assert headline < verdicts < first_case
    table = page[verdicts:first_case]
    for v in summary.verdicts:
        row = (f'<tr class="pass"><td class="mark">PASS</td><td>{html.escape(v.case)}</td>'
               f"<td>{html.escape(v.check)}</td><td>{html.escape(v.detail)}</td></tr>")  # fmt: skip
        assert row in table
    assert table.count("<tr class=") == 11


def test_each_case_holds_its_tables_and_its_own_figures(run: Path) -> None:
    page = (run / REPORT_HTML).read_text()
    test = page[page.index(f'<section id="case-{TEST_CASE}">') :]
    test = test[: test.index("</section>")]
    assert f'id="fig-latency_{TEST_CASE}"' in test and f'id="fig-timeline_{TEST_CASE}"' in test
    assert CONTROL_CASE not in test.split("<figure", 1)[1].split("</figcaption>")[0]
    # The per-phase table is report.md's, as HTML: the warm phase's 6 requests, 0 failed.
    assert "<td>warm</td>\n<td>6</td>\n<td>0</td>" in test


def test_points_carry_their_request_phase_and_figures(run: Path) -> None:
    svg = (run / "plots" / f"latency_{TEST_CASE}.svg").read_text()
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    # 29 requests (6 per anchor phase, 5 pollution), each on both panels.
    assert len(titles) == 2 * 29
    assert titles[0] == (
        "cold-0000 · phase cold · TTFT 80.0 ms · E2EL 110.0 ms · 4 tokens out · 0 cached"
    )
    assert titles[2] == (
        "cold-0002 · phase cold · TTFT 20.0 ms · E2EL 50.0 ms · 4 tokens out · 64 cached"
    )
    timeline = (run / "plots" / f"timeline_{TEST_CASE}.svg").read_text()
    tips = re.findall(r"<title>([^<]*)</title>", timeline)
    # A band per phase (the cold phase begins 0.5 s after the first scrape), then a point per
    # scrape, with the synthetic gauges while a phase runs: KV 0.5, 4 running, 2 waiting.
    assert tips[0] == "phase cold: 0.5–1.8 s"
    assert tips[5].startswith("0.00 s · phase between phases · KV 0.0 % · running 0 · waiting 0")
    assert tips[7] == "0.50 s · phase cold · KV 50.0 % · running 4 · waiting 2 · preemptions 0"


def test_a_failed_request_is_a_point_that_says_so(tmp_path: Path) -> None:
    build_run(tmp_path, Options(failed_request=True))
    build_report(tmp_path)
    svg = (tmp_path / "plots" / f"latency_{TEST_CASE}.svg").read_text()
    assert re.search(r"<title>pollution-0004 · phase pollution · error[^<]*</title>", svg)


def test_the_page_is_byte_identical_when_rebuilt(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = (copy / REPORT_HTML).read_bytes()
    result = CliRunner().invoke(main, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert (copy / REPORT_HTML).read_bytes() == before
    assert f"report: {(copy / REPORT_HTML).resolve().as_uri()}" in result.output


def test_text_from_a_run_is_only_ever_text(run: Path) -> None:
    built = build_report(run)
    evil = Verdict(case="<b>c</b>", check="<script>alert(1)</script>", passed=False,
                   detail="[x](https://example.com) <img src=x onerror=alert(1)>")  # fmt: skip
    summary = built.summary.model_copy(update={"verdicts": [evil]})
    sections = report_sections(summary, built.parts, built.details)
    page = report_page(summary, sections, {})
    assert "<script>alert" not in page and "<img" not in page and "<b>c</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert _OUTSIDE.findall(page) == []
    # Markdown text: raw HTML, links and autolinks stay text.
    assert markdown_html(["<i>x</i> [a](https://e.org) <https://e.org>"]) == (
        "<p>&lt;i&gt;x&lt;/i&gt; [a](https://e.org) &lt;https://e.org&gt;</p>\n"
    )


class _Browser:
    def __init__(self) -> None:
        self.urls: list[str] = []

    def open(self, url: str) -> bool:
        self.urls.append(url)
        return True


def test_report_open_uses_the_browser_and_copes_without_one(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    url = (copy / REPORT_HTML).resolve().as_uri()
    browser = _Browser()
    monkeypatch.setattr(webbrowser, "get", lambda: browser)
    result = CliRunner().invoke(main, ["report", str(copy), "--open"])
    assert result.exit_code == 0, result.output
    assert browser.urls == [url]

    def no_browser() -> None:
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "get", no_browser)
    result = CliRunner().invoke(main, ["report", str(copy), "--open"])
    assert result.exit_code == 0, result.output
    assert f"report: {url}" in result.output
    assert "no browser found on this machine: open the URL above in one" in result.output
