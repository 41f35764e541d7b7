"""A run whose /metrics pages broke the exposition format: the report is still built, each
finding is in the case's data quality, and ``loadgen validate`` warns of the same.

The synthetic prefix-eviction run (``synthetic_run``) is edited after it is written, as a
faulty server or an older scraper would have left it: a TTFT histogram without a ``+Inf``
bucket beside a well-formed ITL histogram, every ``generation_tokens`` line repeated (an
older scraper kept both lines of a page that repeated the series), and scrape-index lines
that say the scraper dropped NaN and duplicate samples.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from analysis.report import summarize
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import REPORT_JSON, case_dir
from loadgen.runformat.manifest import write_manifest
from metrics.store import SAMPLES_FILE, SCRAPES_FILE
from tests.support.synthetic_run import TEST_CASE, build_run

M = {"model_name": "m"}


def _line(t_ns: int, scrape: int, name: str, value: float, **labels: str) -> str:
    return json.dumps(
        {"t_ns": t_ns, "scrape": scrape, "name": name, "labels": {**M, **labels}, "value": value}
    )


def _break_metrics(run_dir: Path) -> int:
    """Edit the tested case's metrics files (module docstring); the number of scrapes."""
    cdir = case_dir(run_dir, TEST_CASE)
    lines = (cdir / SAMPLES_FILE).read_text().splitlines()
    out = []
    for line in lines:
        out.append(line)
        d = json.loads(line)
        if d["name"] != "generation_tokens":
            continue
        t, scrape, n = d["t_ns"], d["scrape"], d["value"]
        out.append(line)  # the repeated series
        # TTFT: buckets 0.05 and 0.5 only, no +Inf.
        out += [_line(t, scrape, "ttft_seconds_bucket", n, le=le) for le in ("0.05", "0.5")]
        out += [_line(t, scrape, "ttft_seconds_sum", n * 0.01),
                _line(t, scrape, "ttft_seconds_count", n)]  # fmt: skip
        # ITL: one observation of 5 ms per generated token, all ≤ 0.01 s.
        out += [_line(t, scrape, "itl_seconds_bucket", n, le=le) for le in ("0.01", "+Inf")]
        out += [_line(t, scrape, "itl_seconds_sum", n * 0.005),
                _line(t, scrape, "itl_seconds_count", n)]  # fmt: skip
    (cdir / SAMPLES_FILE).write_text("\n".join(out) + "\n")
    ticks = [json.loads(line) for line in (cdir / SCRAPES_FILE).read_text().splitlines()]
    ticks[3]["nan_dropped"] = 1
    ticks[4]["duplicates_dropped"] = 2
    (cdir / SCRAPES_FILE).write_text("".join(json.dumps(e) + "\n" for e in ticks))
    return len(ticks)


def test_malformed_pages_leave_a_full_report_that_says_what_was_dropped(tmp_path: Path) -> None:
    build_run(tmp_path)
    scrapes = _break_metrics(tmp_path)
    report = summarize(tmp_path)  # what build_report writes to report.json (plots aside)
    (tmp_path / REPORT_JSON).write_text(json.dumps(report))
    case = report["cases"][TEST_CASE]
    warm = case["phases"]["warm"]
    # 6 requests × 4 output tokens; the repeated line would have made it 48.
    assert warm["counter_deltas"]["generation_tokens"] == 24.0
    # TTFT is unusable and left out; ITL is there: 24 observations in (0, 0.01 s], so the p50
    # rank 12 interpolates to 0.01 × 12/24 = 5 ms, and the mean is 24 × 5 ms / 24 = 5 ms.
    reason = 'no +Inf bucket (le="+Inf"), so its observation count is unknown'
    assert case["unusable_histograms"] == {"ttft_seconds": reason}
    assert set(warm["server_histograms"]) == {"itl_seconds"}
    assert warm["server_histograms"]["itl_seconds"]["p50_ms"] == 5.0
    assert warm["server_histograms"]["itl_seconds"]["mean_ms"] == 5.0
    # One repeat per scrape read back (older scraper) plus the 2 the scraper counted.
    assert case["scrapes"]["duplicates_dropped"] == scrapes + 2
    expected = [
        f"server histogram ttft_seconds unusable ({reason}): its quantiles are left out",
        "1 NaN/±Inf metric sample(s) dropped by the scraper: a gauge peak or a counter read "
        "at those scrapes comes from the other scrapes",
        f"{scrapes + 2} duplicate series sample(s) dropped (a /metrics page repeated a name "
        "and label set; the first kept, as Prometheus does)",
    ]
    assert case["data_quality"] == expected
    assert report["verdict_summary"]["failed"] == 0  # the verdicts are unaffected

    write_manifest(tmp_path, "ok", ["test"])
    result = validate_run(tmp_path)
    assert result.problems == []
    assert result.warnings == [f"{TEST_CASE}: {w}" for w in expected]
    cli = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert cli.exit_code == 0 and "valid (3 warning(s))" in cli.output
