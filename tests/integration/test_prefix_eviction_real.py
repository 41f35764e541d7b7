"""A reduced prefix-eviction on the real embedded vLLM: same structure, smaller cache.

The tested case starts its own 160 MiB server (22 blocks of 128 tokens = 2,816 tokens); the
control attaches to the session's shared 1 GiB server (``--control-url``), which covers both
ways of getting a server. Prefixes are 512 tokens (4 blocks), so a probe that misses pays a
visible prefill. The control needs 4×4 + 2×16×1 + 13×5 + 1 = 114 blocks before revisit
(``control_blocks_needed``), well within 1 GiB's 146.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


REDUCED = (
    "--cache", "160MiB",
    "--prefix-tokens", "512",
    "--suffix-tokens", "32",
    "--requests", "16",
    "--pollution-requests", "1",  # let --pollution-factor (2.5× capacity) size it
    "--output-tokens", "4",
    "--settle-s", "0.6",
)  # fmt: skip


@pytest.fixture(scope="module")
def reduced_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "prefix-eviction", *REDUCED, "--control-url", server_1gib.url
    )


@pytest.fixture(scope="module")
def two_worker_run(
    reduced_run: Path, server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The same reduced run sent by two worker processes. Another seed: the shared control
    server still holds the first run's anchors, and a control must start cold."""
    return run_scenario(
        tmp_path_factory, "prefix-eviction", *REDUCED, "--control-url", server_1gib.url,
        "--seed", "1", "--workers", "2",
    )  # fmt: skip


def test_reduced_prefix_eviction_verdicts_all_pass(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    assert report["verdict_summary"] == {"passed": 11, "failed": 0, "undecided": 0}


def test_pollution_was_sized_from_the_real_capacity(reduced_run: Path) -> None:
    sizing = read_report(reduced_run)["sizing"]
    assert sizing["capacity_tokens"] == 2816  # 160 MiB // (128 × 57,344 B) = 22 blocks
    # ceil(2.5 × 2816 / 544) = 13 pollution prompts of 544 tokens
    assert sizing["pollution_requests"] == 13
    assert sizing["control_needs_blocks"] == 114
    assert sizing["pollution_over_capacity"] >= 2.5


def test_revisit_probes_miss_in_the_small_cache_and_hit_in_the_control(reduced_run: Path) -> None:
    cases = read_report(reduced_run)["details"]["cases"]
    small = [p["cached_tokens"] for p in cases["160MiB"]["probes"] if p["phase"] == "revisit"]
    control = [p["cached_tokens"] for p in cases["control"]["probes"] if p["phase"] == "revisit"]
    assert small == [0, 0, 0, 0]
    assert control == [512, 512, 512, 512]


def test_phase_hit_rates_from_counters_match_per_request_cached_tokens(reduced_run: Path) -> None:
    """Two independent sources (server counters, per-request usage) agree per phase."""
    for case in read_report(reduced_run)["details"]["cases"].values():
        for phase in case["phases"].values():
            assert phase["hit_rate_counters"] == pytest.approx(phase["hit_rate_requests"], abs=1e-9)


def test_validate_passes_on_the_run_directory(reduced_run: Path) -> None:
    proc = loadgen("validate", "--json", str(reduced_run), timeout=120)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["ok"], result["problems"]


def test_report_rebuilt_from_raw_files_equals_the_original(reduced_run: Path) -> None:
    names = ("report.json", "report.md", "report.html")
    before = [(reduced_run / name).read_bytes() for name in names]
    proc = loadgen("report", str(reduced_run), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [(reduced_run / name).read_bytes() for name in names] == before
    assert loadgen("validate", str(reduced_run), timeout=120).returncode == 0


def test_two_workers_give_the_verdicts_counts_and_cached_tokens_of_one(
    reduced_run: Path, two_worker_run: Path
) -> None:
    one, two = read_report(reduced_run), read_report(two_worker_run)
    assert [(v["case"], v["check"], v["passed"]) for v in two["verdicts"]] == [
        (v["case"], v["check"], v["passed"]) for v in one["verdicts"]
    ]
    for case, c1 in one["cases"].items():
        for phase, p1 in c1["phases"].items():
            p2 = two["cases"][case]["phases"][phase]
            assert (p2["requests"], p2["ok"], p2["cached_tokens"]) == (
                p1["requests"], p1["ok"], p1["cached_tokens"]
            ), (case, phase)  # fmt: skip
            assert p2["workers"] == 2 and p1["workers"] is None
            # Closed loop at 4: the server never held more than the 4 asked for.
            assert p2["requested_concurrency"] == 4
            assert p2["server_in_flight_peak"] is not None and p2["server_in_flight_peak"] <= 4
    cdir = two_worker_run / "cases" / "160MiB"
    assert sorted(p.name for p in cdir.glob("requests*.jsonl")) == [
        "requests.worker-0.jsonl", "requests.worker-1.jsonl"
    ]  # fmt: skip
    assert loadgen("validate", str(two_worker_run), timeout=120).returncode == 0


#: The main job's page must stay easy to attach and open (docs/reports.md).
MAX_PAGE_BYTES = 3_000_000


def test_the_report_page_opens_offline_and_stays_small(reduced_run: Path, tmp_path: Path) -> None:
    check_report_page(reduced_run, tmp_path)
    assert (reduced_run / "report.html").stat().st_size < MAX_PAGE_BYTES
