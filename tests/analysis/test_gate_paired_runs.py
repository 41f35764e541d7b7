"""A paired gate on synthetic run directories (``tests.support.synthetic_run``): run N of each
side is pair N, the paired key metrics (``analysis.gate_paired_keys``) decide.

The synthetic run has 6 requests a phase, and some phases mix cache hits (TTFT 20 ms) with
misses (80 ms). TTFT and TPOT are decided by matched per-request log-ratios: identical pairs
give a log-ratio of 0 for every request, so no within- and no between-pair variance.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_sides
from analysis.compare_runs import RunView, load_view, run_dirs
from analysis.gate_decision import Decision, decide
from analysis.gate_file import GateFileError, load_gate
from analysis.gate_paired_keys import _by_request, _matched_sides, _phases
from analysis.gate_sequential import looks_in_time, run_until_decided
from loadgen.cli import main
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import TEST_CASE, Options
from tests.support.synthetic_run import build_run as build_unsealed_run

SMALL_GATE = "min_samples = 4\nmin_tail_samples = 1\n[paired]\nttft_ms = 0.4\ntpot_ms = 0.4\n"


def _run(run_dir: Path, slower: float = 1.0, interleaved: bool = False) -> None:
    build_unsealed_run(run_dir)
    if interleaved:  # as a gate pair run phase by phase records it (loadgen.cli.gate_pair)
        info = json.loads((run_dir / "run.json").read_text())
        info["interleaved"] = {"blocks": "phase", "pair": 1, "first": "baseline", "with": "x"}
        (run_dir / "run.json").write_text(json.dumps(info))
    if slower != 1.0:
        for requests in run_dir.glob("cases/*/requests.jsonl"):
            rows = [json.loads(x) for x in requests.read_text().splitlines() if x.strip()]
            for r in rows:
                if r.get("chunk_ns"):
                    sent = r["sent_ns"]
                    r["chunk_ns"] = [sent + int((t - sent) * slower) for t in r["chunk_ns"]]
                    r["end_ns"] = r["chunk_ns"][-1] + 1_000_000
            requests.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])


def _gate_dir(
    root: Path, slower: float = 1.0, pairs: int = 2, interleaved: bool = False
) -> tuple[Path, Path]:
    for k in range(1, pairs + 1):
        _run(root / "baseline" / f"run-{k}", interleaved=interleaved)
        _run(root / "candidate" / f"run-{k}", slower, interleaved)
    return root / "baseline", root / "candidate"


@pytest.fixture(scope="module")
def small_gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "gate.toml"
    path.write_text(SMALL_GATE)
    return path


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Two pairs each: an A/A gate and one whose candidate is 2.5× slower (built once)."""
    root = tmp_path_factory.mktemp("gates")
    return {"same": _gate_dir(root / "same"), "slow": _gate_dir(root / "slow", 2.5)}


@pytest.fixture(scope="module")
def views(gates: dict[str, tuple[Path, Path]]) -> dict[str, tuple[list[RunView], list[RunView]]]:
    return {
        name: tuple([load_view(p) for p in run_dirs(side)] for side in sides)  # type: ignore[misc]
        for name, sides in gates.items()
    }


def test_a_over_a_pairs_decide_no_regression_on_the_paired_key_metrics(
    views: dict[str, tuple[list[RunView], list[RunView]]], small_gate: Path
) -> None:
    comparison = compare_sides(*views["same"], load_gate(small_gate), paired=True)
    assert comparison.paired is not None
    ttft = next(m for m in comparison.paired if m.case == TEST_CASE and m.metric == "ttft_ms")
    assert (ttft.change, ttft.pairs, ttft.per_pair) == (1.0, 2, [0.0, 0.0])
    # Every matched request's log-ratio is 0: resampled medians stay 0 and the pairs agree,
    # so the interval is the point and the smallest change it can see is 0.
    assert (ttft.low, ttft.high, ttft.se, ttft.mde) == (1.0, 1.0, 0.0, 0.0)
    assert ttft.classification == "no change"
    # Per-run figures of identical pairs: every d_j is 0, so the interval is the point.
    rate = next(m for m in comparison.paired if m.metric == "prefix_cache_hit_rate")
    assert (rate.change, rate.low, rate.high, rate.method) == (0.0, 0.0, 0.0, "range")
    decision = decide(comparison)
    # The paired key metrics decide; the per-phase ones (left inconclusive on 6 requests) are
    # information.
    assert (decision.headline, decision.exit_code) == ("no regression", 0), decision.line
    assert "paired key metrics" in decision.line
    # The smallest change each paired key metric can see, by label, for the looks and CI.
    assert decision.mde[f"{TEST_CASE} paired ttft_ms p50"] == ttft.mde


def test_runs_a_gate_ran_phase_by_phase_are_decided_over_phase_pairs(
    tmp_path: Path, small_gate: Path
) -> None:
    # run.json's `interleaved` makes each (pair, phase) a unit: a candidate 2.5× slower in every
    # request gives d_jp = ln 2.5 in each of the 2 pairs × 5 phases, no residual around the
    # phase means and no request spread, so the interval is the point (ratio 2.5).
    base, cand = _gate_dir(tmp_path, 2.5, interleaved=True)
    views = [[load_view(p) for p in run_dirs(side)] for side in (base, cand)]
    assert {v.blocks for side in views for v in side} == {"phase"}
    comparison = compare_sides(*views, load_gate(small_gate), paired=True)
    ttft = next(m for m in comparison.paired or [] if m.metric == "ttft_ms")
    assert (ttft.units, ttft.pairs, len(ttft.per_phase)) == ("phase", 2, 2)
    assert len(ttft.per_phase[0]) == len(_phases(views[0][0], TEST_CASE)) == 5
    assert all(d == pytest.approx(math.log(2.5), abs=1e-3) for row in ttft.per_phase for d in row)
    assert ttft.classification == "regression"
    # Runs without it (the module's gates) keep the run pair as the unit.
    plain = [[load_view(p) for p in run_dirs(side)] for side in _gate_dir(tmp_path / "p")]
    assert compare_sides(*plain, load_gate(small_gate), paired=True).paired[0].units == "pair"


def test_requests_failed_on_one_side_are_left_out_of_the_matched_sides(tmp_path: Path) -> None:
    # Pollution has 5 requests; the candidate's last (pollution-0004) failed: the phase keeps
    # the 4 requests ok on both sides, matched by id; the other phases keep all 6.
    build_unsealed_run(tmp_path / "b")
    build_unsealed_run(tmp_path / "c", Options(failed_request=True))
    pair = [(load_view(tmp_path / "b"), load_view(tmp_path / "c"))]
    base, cand = _matched_sides(pair, (TEST_CASE, TEST_CASE), "ttft_ms", 1)
    phases = _phases(pair[0][0], TEST_CASE)
    sizes = {ph: (b.size, c.size) for ph, b, c in zip(phases, base[0], cand[0], strict=True)}
    assert sizes["pollution"] == (4, 4)
    assert all(b == (6, 6) for ph, b in sizes.items() if ph != "pollution"), sizes
    assert "pollution-0004" in _by_request(pair[0][0], TEST_CASE, "pollution", "ttft_ms")
    assert "pollution-0004" not in _by_request(pair[0][1], TEST_CASE, "pollution", "ttft_ms")


def test_a_candidate_2_5_times_slower_regresses_naming_ttft(
    views: dict[str, tuple[list[RunView], list[RunView]]], small_gate: Path
) -> None:
    comparison = compare_sides(*views["slow"], load_gate(small_gate), paired=True)
    decision = decide(comparison)
    assert decision.headline == "regression"
    assert f"{TEST_CASE} paired ttft_ms p50" in decision.regressions
    assert f"{TEST_CASE} paired tpot_ms p50" in decision.regressions
    ttft = next(m for m in comparison.paired or [] if m.metric == "ttft_ms")
    assert ttft.change == pytest.approx(2.5, rel=1e-3)


def test_sides_that_are_not_one_gates_pairs_are_refused(
    views: dict[str, tuple[list[RunView], list[RunView]]], small_gate: Path
) -> None:
    base, cand = views["same"]
    renamed = [cand[0], replace(cand[1], run_dir=cand[1].run_dir.with_name("run-3"))]
    with pytest.raises(CompareError, match="same runs on both sides"):
        compare_sides(base, renamed, load_gate(small_gate), paired=True)


def test_paired_tolerances_in_a_gate_file_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[paired]\nttft = 0.1\n")
    with pytest.raises(GateFileError, match="unknown metric 'ttft'"):
        load_gate(bad)
    bad.write_text("[paired]\nttft_ms = -0.1\n")
    with pytest.raises(GateFileError, match="finite number ≥ 0"):
        load_gate(bad)
    good = tmp_path / "good.toml"
    good.write_text("[paired]\nttft_ms = 0.1\n")
    gate = load_gate(good)
    assert gate.paired["ttft_ms"] == 0.1 and gate.paired["tpot_ms"] == 0.07  # merged


def test_compare_paired_cli_exit_codes_and_table(
    gates: dict[str, tuple[Path, Path]], small_gate: Path, tmp_path: Path
) -> None:
    base, cand = gates["same"]
    runner = CliRunner()
    args = ["compare", str(base), str(cand), "--paired", "--gate", str(small_gate)]
    same = runner.invoke(main, [*args, "--out", str(tmp_path / "o1")])
    assert same.exit_code == 0, same.output
    md = (tmp_path / "o1" / "compare.md").read_text()
    assert "Paired key metrics" in md
    # The per-phase table is information in a paired comparison: no row is bold as a key
    # metric, and the method says what decides (it said "Key metrics (in bold)" and bolded
    # the unpaired [key_metrics] rows, which decided nothing).
    assert "| **" not in md and "Key metrics (in bold)" not in md
    assert "the paired key metrics above and every verdict decide the headline" in md
    unpaired = runner.invoke(main, ["compare", str(base), str(cand), "--gate", str(small_gate),
                                    "--out", str(tmp_path / "o0")])  # fmt: skip
    assert "Key metrics (in bold)" in (tmp_path / "o0" / "compare.md").read_text()
    assert "| **ttft_ms p50** |" in (tmp_path / "o0" / "compare.md").read_text(), unpaired.output
    base, cand = gates["slow"]
    args = ["compare", str(base), str(cand), "--paired", "--gate", str(small_gate)]
    slow = runner.invoke(main, [*args, "--out", str(tmp_path / "o2")])
    assert slow.exit_code == 1, slow.output
    assert "paired ttft_ms p50" in slow.output


def test_each_look_records_its_minutes_and_the_smallest_change_it_can_see(
    tmp_path: Path,
) -> None:
    undecided = Decision(headline="inconclusive", exit_code=3, line="x", key_metrics=1,
                         verdicts=0, runs=2, mde={"c paired ttft_ms p50": 0.2})  # fmt: skip
    decided = undecided.model_copy(update={"headline": "no regression", "exit_code": 0,
                                           "mde": {"c paired ttft_ms p50": 0.1}})  # fmt: skip
    answers = iter([undecided, decided])
    looks = tmp_path / "looks.jsonl"
    final = run_until_decided(2, 4, 0.95, lambda k: None, lambda level: next(answers), looks,
                              started_s=time.monotonic() - 90)  # fmt: skip
    rows = [json.loads(x) for x in looks.read_text().splitlines()]
    assert final.headline == "no regression" and [r["pairs"] for r in rows] == [2, 3]
    assert [r["mde"]["c paired ttft_ms p50"] for r in rows] == [0.2, 0.1]
    assert all(90 <= r["elapsed_s"] < 600 for r in rows)


def test_a_time_bound_stops_before_the_pair_that_would_pass_it(tmp_path: Path) -> None:
    # A fake clock: every pair takes 100 s and a look nothing. The first two pairs end at
    # 200 s, 100 s a pair: the 300 s bound leaves room for 1 + ⌊(300 − 200)/100⌋ = 2 looks, so
    # the gate plans 2 (not the 5 of 2 to 6 pairs), each at 1 − 0.05/2 = 0.975, runs pair 3
    # (200 + 100 = 300 s fits) and stops at its second look, 3 pairs, still undecided.
    now = [200.0]
    undecided = Decision(headline="inconclusive", exit_code=3, line="x", key_metrics=1,
                         verdicts=0, runs=2)  # fmt: skip

    def add_pair(k: int) -> None:
        now[0] += 100

    looks = tmp_path / "looks.jsonl"
    final = run_until_decided(2, 6, 0.95, add_pair, lambda level: undecided, looks,
                              started_s=0.0, max_minutes=5, clock=lambda: now[0])  # fmt: skip
    rows = [json.loads(x) for x in looks.read_text().splitlines()]
    assert final.exit_code == 3
    assert [(r["pairs"], r["elapsed_s"], r["next_pair_s"], r["stop"]) for r in rows] == [
        (2, 200.0, 100.0, False), (3, 300.0, 100.0, True)]  # fmt: skip
    assert "the last of the 2 look(s) planned to fit --max-minutes 5" in rows[-1]["why"]
    assert all(r["confidence"] == pytest.approx(0.975) and r["looks"] == 2 for r in rows)


def test_the_looks_planned_are_those_that_fit_the_time_bound() -> None:
    # Two pairs took 840 s (420 s a pair). 20 min: ⌊(1200 − 840)/420⌋ = 0 more, 1 look (95 %);
    # 30 min: ⌊960/420⌋ = 2 more, 3 looks; no bound: 2 to 10 pairs, 9 looks; a bound already
    # passed still plans the look that is about to be taken.
    assert looks_in_time(2, 10, 840.0, 20) == 1
    assert looks_in_time(2, 10, 840.0, 30) == 3
    assert looks_in_time(2, 10, 840.0, None) == 9
    assert looks_in_time(2, 10, 1500.0, 20) == 1
    assert looks_in_time(2, 3, 60.0, 60) == 2  # never more than --max-repeats allows
