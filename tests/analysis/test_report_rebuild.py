"""analysis.report.build_report on a synthetic run: files, hand-computed values, rebuilds.

Numbers come from the construction in ``synthetic_run`` (see its docstring): 72-token prompts,
6 requests per anchor phase of which the first 2 are probes, 20 ms TTFT on a hit and 80 ms on
a miss, 4 tokens 10 ms apart, sends 150 ms apart.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.report import build_report, summarize
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import REPORT_HTML, REPORT_JSON, REPORT_MD, case_dir
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import (
    CLIENT_PLACEMENT,
    CONTROL_CASE,
    TEST_CASE,
    Options,
    build_run,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("run")
    build_run(run_dir)
    return run_dir, build_report(run_dir).as_dict()


def test_report_files_are_written(built: tuple[Path, dict]) -> None:
    run_dir, report = built
    assert report["plots"] == [
        "plots/ttft_by_phase.png",
        "plots/hit_rate_by_phase.png",
        f"plots/latency_{TEST_CASE}.png",
        f"plots/timeline_{TEST_CASE}.png",
        f"plots/latency_{CONTROL_CASE}.png",
        f"plots/timeline_{CONTROL_CASE}.png",
    ]
    for rel in report["plots"]:
        assert (run_dir / rel).read_bytes()[:8] == PNG_MAGIC
        assert (run_dir / rel).with_suffix(".svg").read_text().startswith("<svg ")
    assert json.loads((run_dir / REPORT_JSON).read_text()) == report
    assert (run_dir / REPORT_MD).read_text().startswith("# prefix-eviction\n")


def test_hit_rates_from_counter_deltas_and_from_requests(built: tuple[Path, dict]) -> None:
    _, report = built
    test = report["details"]["cases"][TEST_CASE]["phases"]
    control = report["details"]["cases"][CONTROL_CASE]["phases"]
    deltas = {p: v["counter_deltas"] for p, v in report["cases"][TEST_CASE]["phases"].items()}
    # Queries per anchor phase: 6 × 72 = 432 tokens. Hits: cold and (tested) revisit 4 × 64 =
    # 256; warm, rewarm and control revisit 6 × 64 = 384; pollution 0 of 5 × 72 = 360.
    expected = {"cold": 256 / 432, "warm": 384 / 432, "pollution": 0.0, "revisit": 256 / 432}
    for phase, rate in expected.items():
        assert test[phase]["hit_rate_counters"] == pytest.approx(rate)
        assert test[phase]["hit_rate_requests"] == pytest.approx(rate)
    assert control["revisit"]["hit_rate_counters"] == pytest.approx(384 / 432)
    assert deltas["revisit"]["prefix_cache_queries"] == 432.0
    assert deltas["revisit"]["prefix_cache_hits"] == 256.0
    assert deltas["pollution"]["generation_tokens"] == 20.0  # 5 × 4
    assert deltas["warm"]["request_success"] == 6.0  # summed over reasons
    assert deltas["warm"]["num_preemptions"] == 0.0
    # Lifetime: hits 256 + 384 + 0 + 256 + 384 = 1280 over queries 4 × 432 + 360 = 2088.
    lifetime = report["details"]["cases"][TEST_CASE]["lifetime_hit_rate"]
    assert lifetime == pytest.approx(1280 / 2088)
    assert test["warm"]["lifetime_hit_rate_at_end"] == pytest.approx(640 / 864)


def test_latency_and_throughput(built: tuple[Path, dict]) -> None:
    _, report = built
    revisit = report["cases"][TEST_CASE]["phases"]["revisit"]
    # TTFTs [80, 80, 20, 20, 20, 20]: mean 40, p50 20, p95 at rank 4.75 → 80.
    assert revisit["ttft_ms"]["mean"] == pytest.approx(40.0)
    assert revisit["ttft_ms"]["p50"] == pytest.approx(20.0)
    assert revisit["ttft_ms"]["p95"] == pytest.approx(80.0)
    assert revisit["tpot_ms"]["mean"] == pytest.approx(10.0)  # 30 ms / 3
    assert revisit["itl_ms"]["count"] == 18  # 6 requests × 3 gaps of 1 token each
    assert revisit["itl_ms"]["mean"] == pytest.approx(10.0)
    assert revisit["chunk_gap_ms"]["mean"] == pytest.approx(10.0)
    assert revisit["tokens_per_chunk"]["mean"] == 1.0
    # Last request sent at 750 ms, first token +20 ms, last +50 ms, ends 801 ms after start:
    # 24 tokens / 0.801 s and 6 requests / 0.801 s.
    assert revisit["duration_s"] == pytest.approx(0.801)
    assert revisit["output_throughput_tok_s"] == pytest.approx(24 / 0.801)
    assert revisit["request_throughput_req_s"] == pytest.approx(6 / 0.801)
    assert revisit["gauge_peaks"] == {
        "kv_cache_usage_perc": 0.5,
        "num_requests_running": 4.0,
        "num_requests_waiting": 2.0,
    }
    assert revisit["deltas_flag"] is None  # a scrape started after the last request ended
    ratios = report["details"]["cases"][TEST_CASE]["ratios"]
    assert ratios == [
        {"phase": "revisit", "baseline": "warm", "ttft_mean_ratio": 2.0, "ttft_p95_ratio": 4.0},
        {"phase": "revisit", "baseline": "rewarm", "ttft_mean_ratio": 2.0, "ttft_p95_ratio": 4.0},
    ]


def test_probes_and_verdicts(built: tuple[Path, dict]) -> None:
    run_dir, report = built
    probes = report["details"]["cases"][TEST_CASE]["probes"]
    revisit = [
        (p["request_id"], p["cached_tokens"], p["ttft_ms"])
        for p in probes
        if p["phase"] == "revisit"
    ]
    assert revisit == [("revisit-0000", 0, 80.0), ("revisit-0001", 0, 80.0)]
    assert [p["phase"] for p in probes] == ["cold"] * 2 + ["warm"] * 2 + ["revisit"] * 2 + [
        "rewarm"
    ] * 2
    # 8 effect checks, a cold-start check per case, and the control's capacity check
    # (1024 tokens ≥ 736 needed).
    assert report["verdict_summary"] == {"passed": 11, "failed": 0, "undecided": 0}
    md = (run_dir / REPORT_MD).read_text()
    assert (
        f"- **PASS** {TEST_CASE}: revisit probes miss — 2/2 probes miss (cached tokens ≤ 0); "
        "cached tokens: [0, 0]"
    ) in md
    assert (
        f"- **PASS** {TEST_CASE}: revisit/warm ttft_ms p95 ≥ 1.2× — 80.0 ms / 20.0 ms = 4.00×" in md
    )
    assert "11 passed, 0 failed, 0 undecided." in md
    assert "did not show every effect" not in md


def test_building_twice_gives_identical_report(tmp_path: Path, built: tuple[Path, dict]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(built[0], run_dir)
    first_json = (run_dir / REPORT_JSON).read_bytes()
    first_md = (run_dir / REPORT_MD).read_bytes()
    first_html = (run_dir / REPORT_HTML).read_bytes()
    first_svgs = {p.name: p.read_bytes() for p in (run_dir / "plots").glob("*.svg")}
    build_report(run_dir)
    assert (run_dir / REPORT_JSON).read_bytes() == first_json
    assert (run_dir / REPORT_MD).read_bytes() == first_md
    assert (run_dir / REPORT_HTML).read_bytes() == first_html
    assert {p.name: p.read_bytes() for p in (run_dir / "plots").glob("*.svg")} == first_svgs
    assert summarize(run_dir) | {"plots": json.loads(first_json)["plots"]} == json.loads(first_json)


def test_loadgen_report_rebuilds_the_same_report_and_reseals(
    tmp_path: Path, built: tuple[Path, dict]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(built[0], run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    outputs = (REPORT_JSON, REPORT_MD, REPORT_HTML)
    original = [(run_dir / name).read_bytes() for name in outputs]
    for name in outputs:
        (run_dir / name).unlink()
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert [(run_dir / name).read_bytes() for name in outputs] == original
    assert (run_dir / REPORT_HTML).resolve().as_uri() in result.output
    assert validate_run(run_dir).problems == []


def test_failed_requests_are_counted_and_shown(tmp_path: Path) -> None:
    build_run(tmp_path, Options(failed_request=True))
    report = build_report(tmp_path).as_dict()
    case = report["cases"][TEST_CASE]
    pollution = case["phases"]["pollution"]
    assert (pollution["requests"], pollution["ok"], pollution["failed"]) == (5, 4, 1)
    assert pollution["output_throughput_tok_s"] is not None
    assert case["requests_failed"] == 1
    assert case["status"] == "failed"
    assert case["error"] == "1 of 29 requests failed"
    assert "| pollution | 5 | 1 |" in (tmp_path / REPORT_MD).read_text()
    # Latency over successful requests only: 4 requests × 3 gaps in pollution.
    assert pollution["itl_ms"]["count"] == 12


def test_a_case_that_never_ran_leaves_its_checks_undecided(tmp_path: Path) -> None:
    build_run(tmp_path)
    shutil.rmtree(case_dir(tmp_path, CONTROL_CASE))
    # The run failed before its second case started (with status ok, a case that never
    # started is a broken run: the report refuses it).
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(json.loads(run_json.read_text()) | {"status": "failed"}))
    report = build_report(tmp_path).as_dict()
    assert report["cases"][CONTROL_CASE]["status"] == "missing"
    # The control's 2 effect checks, its cold-start and capacity checks cannot be decided.
    assert report["verdict_summary"] == {"passed": 7, "failed": 0, "undecided": 4}
    md = (tmp_path / REPORT_MD).read_text()
    assert f"- **UNDECIDED** {CONTROL_CASE}: probe_cache — case has no completed phase" in md
    assert "**The scenario did not show every effect it declares: that is a finding" in md


def test_the_report_says_how_the_load_generator_ran(built: tuple[Path, dict]) -> None:
    run_dir, report = built
    assert report["cases"][TEST_CASE]["client"] == [CLIENT_PLACEMENT]
    assert (
        "Load generator: SCHED_FIFO 1 on core(s) 1 (real-time on core(s) 1; the server "
        "computes on core(s) 0)."
    ) in (run_dir / REPORT_MD).read_text()


def test_a_malformed_client_record_is_dropped_not_fatal() -> None:
    from analysis.summaries import client_rows

    assert client_rows({"policy": "x"}) == []  # not a list
    assert client_rows([None, "SCHED_FIFO", 5]) == [None]  # Ray's None kept, junk dropped
    assert client_rows([{"policy": 5, "cpus": "1", "reason": None, "problem": 3}]) == [
        {"policy": "?", "cpus": None, "reason": "", "problem": None}
    ]
    assert client_rows([{"policy": "SCHED_FIFO 1", "cpus": [1], "reason": "r"}]) == [
        {"policy": "SCHED_FIFO 1", "cpus": [1], "reason": "r", "problem": None}
    ]
