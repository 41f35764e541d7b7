"""The workers benchmark's open-loop target is judged from its figures (no timing here)."""

from __future__ import annotations

from typing import Any

from bench_workers import holds, open_loop_target


def _run(send_over_schedule: float, p99_ms: float) -> dict[str, Any]:
    return {"send_over_schedule": send_over_schedule, "lateness_p99_ms": p99_ms}


def _rate(factor: float, one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    return {"factor": factor, "runs": {"1 worker (this process)": one, "2 worker processes": two}}


def test_holding_a_rate_needs_both_the_rate_within_1_percent_and_p99_under_2_ms() -> None:
    assert holds(_run(1.01, 1.999))  # exactly 1 % off is within
    assert not holds(_run(1.0101, 0.5))
    assert not holds(_run(0.989, 0.5))
    assert not holds(_run(1.0, 2.0))  # p99 must be below 2 ms


def test_target_is_met_when_two_workers_hold_rates_one_cannot() -> None:
    rates = [
        _rate(0.5, _run(1.0, 1.5), _run(1.0, 1.1)),  # one worker holds: not a test of two
        _rate(0.6, _run(1.0, 11.0), _run(1.0006, 1.07)),
        _rate(0.7, _run(0.98, 1.0), _run(1.0006, 1.9)),  # one worker's rate 2 % short
    ]
    assert open_loop_target(rates) == {
        "beyond_one_worker": [0.6, 0.7],
        "held_by_two_workers": [0.6, 0.7],
        "missed_by_two_workers": [],
        "met": True,
    }


def test_rates_two_workers_did_not_hold_are_listed_beside_the_verdict() -> None:
    mixed = [
        _rate(0.6, _run(1.0, 11.0), _run(1.0, 1.0)),
        _rate(0.7, _run(1.0, 9.9), _run(1.0, 2.06)),
    ]
    assert open_loop_target(mixed) == {
        "beyond_one_worker": [0.6, 0.7],
        "held_by_two_workers": [0.6],
        "missed_by_two_workers": [0.7],
        "met": True,
    }


def test_target_is_missed_when_two_workers_hold_no_rate_one_cannot() -> None:
    missed = [_rate(0.7, _run(1.0, 9.9), _run(1.0, 2.06))]
    assert open_loop_target(missed)["met"] is False
    easy = [_rate(0.3, _run(1.0, 1.0), _run(1.0, 0.9))]  # one worker was never defeated
    assert open_loop_target(easy) == {
        "beyond_one_worker": [],
        "held_by_two_workers": [],
        "missed_by_two_workers": [],
        "met": False,
    }
