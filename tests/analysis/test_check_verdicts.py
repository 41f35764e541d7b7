"""analysis.checks.evaluate: PASS / FAIL / UNDECIDED for each declared check kind."""

from __future__ import annotations

from typing import Any

from analysis.checks import Verdict, evaluate
from scenarios.checks import HitRateCompare, LatencyRatio, ProbeCache


def case(**phases: dict[str, Any]) -> dict[str, Any]:
    return {"phases": phases, "probes": []}


def probes(phase: str, cached: list[int | None]) -> list[dict[str, Any]]:
    return [
        {"phase": phase, "group": f"anchors-{i}", "cached_tokens": c} for i, c in enumerate(cached)
    ]


def one(check: Any, cases: dict[str, dict[str, Any]]) -> Verdict:
    [verdict] = evaluate((check,), cases)
    return verdict


WARM = {"hit_rate_counters": 0.970, "ttft_ms": {"mean": 40.0, "p95": 50.0}}
COLD = {"hit_rate_counters": 0.889, "ttft_ms": {"mean": 60.0, "p95": 200.0}}
REVISIT = {"hit_rate_counters": 0.889, "ttft_ms": {"mean": 45.0, "p95": 150.0}}


def test_probe_hit_passes_when_every_probe_has_enough_cached_tokens() -> None:
    c = case(warm=WARM) | {"probes": probes("warm", [1024, 1024, 512, 1024])}
    v = one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512), {"a": c})
    assert v == Verdict(
        "a",
        "warm probes hit",
        True,
        "4/4 probes hit (cached tokens ≥ 512); cached tokens: [1024, 1024, 512, 1024]",
    )


def test_probe_hit_fails_on_one_short_or_missing_probe() -> None:
    c = case(warm=WARM) | {"probes": probes("warm", [1024, 511, None])}
    v = one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512), {"a": c})
    assert v.passed is False
    assert v.detail.startswith("1/3 probes hit")


def test_probe_miss_passes_only_at_or_below_the_maximum() -> None:
    check = ProbeCache(case="a", phase="revisit", expect="miss", max_cached_tokens=0)
    missed = case(revisit=REVISIT) | {"probes": probes("revisit", [0, 0, 0, 0])}
    hit_one = case(revisit=REVISIT) | {"probes": probes("revisit", [0, 128, 0, 0])}
    assert one(check, {"a": missed}).passed is True
    assert one(check, {"a": hit_one}).passed is False


def test_probe_check_without_probes_in_the_phase_is_undecided() -> None:
    c = case(warm=WARM) | {"probes": probes("rewarm", [1024])}
    v = one(ProbeCache(case="a", phase="warm", expect="hit"), {"a": c})
    assert v.passed is None
    assert v.detail == "no probe requests recorded in warm"


def test_hit_rate_below() -> None:
    cases = {"a": case(warm=WARM, revisit=REVISIT)}
    # 0.889 < 0.970 − 0.02 = 0.950 → pass; with tolerance 0.1: 0.889 < 0.870 is false → fail.
    passing = HitRateCompare(case="a", phase="revisit", other="warm", relation="below")
    failing = passing.model_copy(update={"tolerance": 0.1})
    v = one(passing, cases)
    assert (v.passed, v.check) == (True, "revisit hit rate below warm")
    assert v.detail == "revisit 0.889 vs warm 0.970 (tolerance 0.02)"
    assert one(failing, cases).passed is False


def test_hit_rate_close() -> None:
    cases = {"a": case(cold=COLD, warm=WARM, revisit=REVISIT)}
    close = HitRateCompare(case="a", phase="revisit", other="cold", relation="close")
    far = HitRateCompare(case="a", phase="revisit", other="warm", relation="close")
    assert one(close, cases).passed is True  # |0.889 − 0.889| = 0 ≤ 0.02
    assert one(far, cases).passed is False  # |0.889 − 0.970| = 0.081 > 0.02


def test_hit_rate_with_a_missing_rate_is_undecided() -> None:
    no_counters = {"hit_rate_counters": None, "ttft_ms": {}}
    cases = {"a": case(warm=WARM, revisit=no_counters)}
    v = one(HitRateCompare(case="a", phase="revisit", other="warm", relation="below"), cases)
    assert v.passed is None
    assert v.detail == "revisit n/a vs warm 0.970 (tolerance 0.02)"


def test_latency_ratio() -> None:
    cases = {"a": case(warm=WARM, revisit=REVISIT)}
    # p95 150 / 50 = 3.0 ≥ 1.2 → pass; ≥ 3.5 → fail; mean 45/40 = 1.125 < 1.2 → fail.
    check = LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2)
    v = one(check, cases)
    assert (v.passed, v.detail) == (True, "150.0 ms / 50.0 ms = 3.00×")
    assert v.check == "revisit/warm ttft_ms p95 ≥ 1.2×"
    assert one(check.model_copy(update={"min_ratio": 3.5}), cases).passed is False
    assert one(check.model_copy(update={"stat": "mean"}), cases).passed is False


def test_latency_ratio_with_missing_or_zero_baseline_is_undecided() -> None:
    check = LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2)
    zero = {"hit_rate_counters": 1.0, "ttft_ms": {"p95": 0.0}}
    assert one(check, {"a": case(warm=zero, revisit=REVISIT)}).passed is None
    assert one(check, {"a": case(revisit=REVISIT)}).passed is None


def test_check_on_a_case_that_did_not_run_is_undecided() -> None:
    check = HitRateCompare(case="control", phase="revisit", other="warm", relation="close")
    for cases in ({}, {"control": case()}):
        assert one(check, cases) == Verdict(
            "control", "hit_rate_compare", None, "case has no completed phase"
        )


def test_one_verdict_per_check_in_order() -> None:
    cases = {"a": case(warm=WARM, revisit=REVISIT)}
    checks = (
        LatencyRatio(case="a", phase="revisit", other="warm", min_ratio=1.2),
        HitRateCompare(case="b", phase="revisit", other="warm", relation="close"),
        HitRateCompare(case="a", phase="revisit", other="warm", relation="below"),
    )
    assert [(v.case, v.passed) for v in evaluate(checks, cases)] == [
        ("a", True),
        ("b", None),
        ("a", True),
    ]
