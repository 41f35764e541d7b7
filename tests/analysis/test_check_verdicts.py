"""analysis.checks.evaluate: the generic check kinds, undecided cases, and dispatch."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.checks import evaluate
from analysis.models import CaseSummary, Verdict
from analysis.reports import ScenarioReport
from scenarios.checks import CapacityAtLeast, CheckSpec, LatencyRatio
from tests.support.summary_builders import case, phase

GENERIC: ScenarioReport[Any] = ScenarioReport()

WARM = phase("warm", ttft_ms={"mean": 40.0, "p95": 50.0})
REVISIT = phase("revisit", ttft_ms={"mean": 45.0, "p95": 150.0})


def one(check: Any, cases: dict[str, CaseSummary]) -> Verdict:
    [verdict] = evaluate((check,), cases, GENERIC, None)
    return verdict


def test_latency_ratio() -> None:
    cases = {"a": case("a", WARM, REVISIT)}
    # p95 150 / 50 = 3.0 ≥ 1.2 → pass; ≥ 3.5 → fail; mean 45/40 = 1.125 < 1.2 → fail.
    check = LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2)
    v = one(check, cases)
    assert (v.passed, v.detail) == (True, "150.0 ms / 50.0 ms = 3.00×")
    assert v.check == "revisit/warm ttft_ms p95 ≥ 1.2×"
    assert one(check.model_copy(update={"min_ratio": 3.5}), cases).passed is False
    assert one(check.model_copy(update={"stat": "mean"}), cases).passed is False


def test_latency_ratio_with_missing_or_zero_baseline_is_undecided() -> None:
    check = LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2)
    zero = phase("warm", ttft_ms={"p95": 0.0})
    assert one(check, {"a": case("a", zero, REVISIT)}).passed is None
    assert one(check, {"a": case("a", REVISIT)}).passed is None


def test_capacity_needs_no_phase_to_be_decided() -> None:
    check = CapacityAtLeast(case="c", tokens=1000, why="must hold all")
    big = case("c", server={"capacity": {"tokens": 1024}})
    small = case("c", server={"capacity": {"tokens": 512}})
    assert one(check, {"c": big}) == Verdict(
        case="c", check="KV capacity ≥ 1000 tokens", passed=True,
        detail="capacity 1024 tokens; must hold all",
    )  # fmt: skip
    assert one(check, {"c": small}).passed is False
    assert one(check, {"c": case("c")}).passed is None  # capacity unknown
    # An attached control whose /metrics redirected: the verdict carries the reason.
    why = "GET http://127.0.0.1:9/metrics answered HTTP 302 redirecting to http://x/metrics"
    unknown = one(check, {"c": case("c", server={"capacity_error": why})})
    assert (unknown.passed, unknown.detail) == (None, f"capacity unknown ({why}); must hold all")


def test_check_on_a_case_that_did_not_run_is_undecided() -> None:
    check = LatencyRatio(case="control", phase="revisit", other="warm", min_ratio=1.2)
    for cases in ({}, {"control": case("control")}):
        assert one(check, cases) == Verdict(
            case="control", check="latency_ratio", passed=None,
            detail="case has no completed phase",
        )  # fmt: skip


def test_one_verdict_per_check_in_order() -> None:
    cases = {"a": case("a", WARM, REVISIT)}
    checks = (
        LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2),
        LatencyRatio(case="b", phase="revisit", other="warm", min_ratio=1.2),
        LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=9.0),
    )
    verdicts = evaluate(checks, cases, GENERIC, None)
    assert [(v.case, v.passed) for v in verdicts] == [("a", True), ("b", None), ("a", False)]


class _Unheard(CheckSpec):
    kind: str = "unheard_of_in_tests"


def test_a_check_kind_nobody_evaluates_is_an_error_not_a_silent_pass() -> None:
    with pytest.raises(KeyError, match="unheard_of_in_tests"):
        evaluate((_Unheard(case="a"),), {"a": case("a", WARM)}, GENERIC, None)
