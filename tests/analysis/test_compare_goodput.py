"""Goodput is compared: each scenario with SLOs gives its phases' goodput from its own report
section (``ScenarioReport.phase_goodput``), and ``loadgen compare``/``gate`` compare it as
``goodput_req_s``, pooled and paired. (The figure used to be read from an attribute the phase
summary never had, so no comparison ever held a goodput row.)"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from analysis.compare import compare_sides
from analysis.compare_runs import RunView, load_view
from analysis.gate_file import load_gate
from analysis.reports.bench import BenchCase, BenchDetails, BenchReport
from analysis.reports.bench.figures import BenchPhase
from analysis.reports.slo_goodput.models import SLOGoodputDetails, SweepPoint
from analysis.reports.slo_goodput.report import SLOGoodputReport
from analysis.reports.trace_replay import TraceReplayReport
from analysis.reports.trace_replay.details import CaseFigures, PhaseFigures, TraceReplayDetails
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import TEST_CASE, build_run


def test_each_scenario_with_slos_gives_its_phases_goodput() -> None:
    trace = TraceReplayDetails.model_construct(cases={"1GiB": CaseFigures.model_construct(
        phases={"speedup-0.5x": PhaseFigures.model_construct(goodput_rps=1.75),
                "speedup-1x": PhaseFigures.model_construct(goodput_rps=None)})})  # fmt: skip
    assert TraceReplayReport().phase_goodput(trace) == {
        ("1GiB", "speedup-0.5x"): 1.75, ("1GiB", "speedup-1x"): None}  # fmt: skip
    sweep = SLOGoodputDetails.model_construct(case="c", points=[
        SweepPoint.model_construct(phase="rate-1", goodput_rps=0.9),
        SweepPoint.model_construct(phase="rate-2", goodput_rps=1.6)])  # fmt: skip
    assert SLOGoodputReport().phase_goodput(sweep) == {("c", "rate-1"): 0.9, ("c", "rate-2"): 1.6}
    bench = BenchDetails.model_construct(cases=[BenchCase.model_construct(case="b", phases=[
        BenchPhase.model_construct(phase="with-slo", good=8, goodput_req_s=2.0),
        BenchPhase.model_construct(phase="no-slo", good=None, goodput_req_s=None)])])  # fmt: skip
    assert BenchReport().phase_goodput(bench) == {("b", "with-slo"): 2.0}
    for report in (TraceReplayReport(), SLOGoodputReport(), BenchReport()):
        assert report.phase_goodput(None) == {}


def _views(root: Path, goodput: list[float]) -> list[RunView]:
    views = []
    for k, value in enumerate(goodput, 1):
        run_dir = root / f"run-{k}"
        build_run(run_dir)
        write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
        view = load_view(run_dir)
        phase = view.plan.phases_of(view.plan.cases[0])[0].name
        views.append(replace(view, goodput={(TEST_CASE, phase): value}))
    return views


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RunView], list[RunView]]:
    root = tmp_path_factory.mktemp("goodput")
    return _views(root / "baseline", [2.0, 2.2]), _views(root / "candidate", [1.5, 1.65])


def test_goodput_is_compared_pooled_and_paired(
    sides: tuple[list[RunView], list[RunView]],
) -> None:
    gate = load_gate(None)
    pooled = compare_sides(*sides, gate)
    [row] = [m for m in pooled.metrics if m.metric == "goodput_req_s"]
    # Ratio of the side means: 1.575 / 2.1 = 0.75.
    assert row.change == pytest.approx(0.75)
    assert row.per_run_baseline == [2.0, 2.2] and row.per_run_candidate == [1.5, 1.65]
    paired = compare_sides(*sides, gate, paired=True)
    [key] = [m for m in paired.paired or [] if m.metric == "goodput_req_s"]
    # Each pair: ln(1.5/2.0) = ln(1.65/2.2) = ln 0.75; with 2 equal pairs the range rule
    # gives the point, 25 % below the 10 % tolerance: a regression.
    assert key.per_pair == pytest.approx([math.log(0.75)] * 2)
    assert (key.change, key.low, key.high) == pytest.approx((0.75, 0.75, 0.75))
    assert key.classification == "regression"
