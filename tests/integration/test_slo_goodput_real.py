"""A reduced slo-goodput on the real embedded vLLM: saturation found, rates resolved from it,
the collapse past it, the maximum sustainable rate bracketed.

One server of its own (256 MiB = 36 blocks of 128 tokens, max_num_seqs 8: a batch of 8
requests of 128 + 32 tokens, 2 blocks each); an unloaded probe of 12 requests, 8 s of
closed-loop saturation at 16 in flight (2 × 8; 32 blocks fit), then Poisson rates at 0.5 and
2 × the measured saturation for 10 s each (2 s warm-up), default SLOs (3 × the unloaded TTFT
and TPOT p50). About 80 s with the server start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from loadgen.runformat import PhaseRow
from loadgen.runformat.reading import read_jsonl
from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "slo-goodput",
        "--cache", "256MiB",
        "--max-num-seqs", "8",
        "--unloaded-requests", "12",
        "--unloaded-warmup", "0.5s",
        "--saturation-duration", "8s",
        "--duration", "10s",
        "--warmup", "2s",
        "--rate-fractions", "0.5,2",
        "--settle-s", "0.6",
    )  # fmt: skip


#: The check about the load generator itself (achieved rate within 5 % of offered
#: and send lateness p99 < 5 ms at every rate). Since the engine core runs at nice 19
#: (``server.priority``) it passed here (worst lateness p99 1.9 ms), but it is about the
#: machine as much as the scenario: in one CI run the client process was not scheduled for
#: 7 s (nothing stamped, loop lag 6,981 ms) while the scraper and vLLM ran on.
CLIENT_CHECK = "client kept up"


def test_every_verdict_about_the_server_passes(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    verdicts = report["verdicts"]
    (client,) = [v for v in verdicts if v["check"].startswith(CLIENT_CHECK)]
    failed = []
    for v in verdicts:
        if v["check"].startswith(CLIENT_CHECK) or v["passed"] is True:
            continue
        # A verdict excused because the load was not delivered must say so, and the client
        # check must have failed with it: anything else counts against the server.
        excused = (
            v["passed"] is None
            and v["detail"].startswith("undecided: the client sent")
            and client["passed"] is False
        )
        if not excused:
            failed.append(v)
    assert not failed, json.dumps(failed, indent=2)


def test_the_client_check_is_decided_from_every_rates_figures(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    (verdict,) = [v for v in report["verdicts"] if v["check"].startswith(CLIENT_CHECK)]
    points = report["details"]["points"]
    assert [p["phase"] for p in points] == ["rate-0.50x", "rate-2.00x"]
    kept_up = all(
        abs(p["achieved_rps"] / p["offered_rps"] - 1) <= 0.05 and p["lateness_ms"]["p99"] < 5
        for p in points
    )
    assert verdict["passed"] is kept_up, json.dumps(verdict, indent=2)


def test_rates_were_resolved_from_the_measured_saturation(reduced_run: Path) -> None:
    case = reduced_run / "cases" / "256MiB"
    lines = {
        p.phase: msgspec.to_builtins(p) for p in read_jsonl(case / "phases.jsonl", PhaseRow).rows
    }
    sat = lines["saturation"]["measurement"]["closed_loop_rps"]
    assert sat > 0
    for name, factor in (("rate-0.50x", 0.5), ("rate-2.00x", 2.0)):
        resolved = lines[name]["resolved"]
        assert resolved["rate_from"]["measured"] == sat
        assert resolved["rate_rps"] == pytest.approx(factor * sat)
    details = read_report(reduced_run)["details"]
    assert details["saturation"]["concurrency"] == 16
    assert all(x["agrees"] for x in details["late_figures"])


def test_the_top_rate_is_busy_but_useless(reduced_run: Path) -> None:
    details = read_report(reduced_run)["details"]
    top = details["points"][-1]
    assert top["goodput_rps"] <= 0.25 * top["completed_rps"]
    assert top["waiting_peak"] > 0  # the queue is vLLM's
    assert details["answer"]["bracketed"]


def test_validate_passes_and_the_report_rebuilds_identically(reduced_run: Path) -> None:
    assert loadgen("validate", str(reduced_run), timeout=120).returncode == 0
    names = ("report.json", "report.md", "report.html")
    before = [(reduced_run / name).read_bytes() for name in names]
    proc = loadgen("report", str(reduced_run), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [(reduced_run / name).read_bytes() for name in names] == before


def test_the_load_generator_ran_off_the_cores_vllm_computes_on(reduced_run: Path) -> None:
    """``--client-priority auto`` against the embedded vLLM of this host: its compute cores
    found from its bound worker threads (``server.cpus``), the sending thread pinned to the
    rest (``loadgen.placement``) and real-time unless the kernel refused it."""
    (case_json,) = reduced_run.glob("cases/*/case.json")
    info = json.loads(case_json.read_text())
    host = info["server"]["host"]
    assert host["this_host"] is True
    compute = set(host["compute_cpus"])
    machine = set(os.sched_getaffinity(0))
    assert compute and compute < machine  # vLLM binds its worker to fewer cores than it has
    (client,) = info["client"]
    assert client["cpus"] == sorted(machine - compute)
    if client["problem"] is None:
        assert client["policy"] == "SCHED_FIFO 1"
    else:  # no CAP_SYS_NICE here: pinned all the same, and the record says why
        assert client["policy"] == "SCHED_OTHER"
        assert client["problem"].startswith("SCHED_FIFO refused")


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    reduced_run: Path, tmp_path: Path
) -> None:
    check_report_page(reduced_run, tmp_path)
