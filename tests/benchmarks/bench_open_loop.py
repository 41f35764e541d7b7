"""Benchmark 3: open-loop send accuracy, ours vs vLLM's ``get_request``, same run, same server.

Poisson arrivals at 100, 500 and 1,000 req/s against the zero-delay fake (own process, own
core), 20 s per rate and client, as 2 alternating rounds of 10 s (A B A B). 16-token answers.

- achieved rate = (n − 1) / (last send − first send), compared with the rate of the schedule
  the client was given ((n − 1) / its last offset − first offset): vLLM's schedule is scaled
  to exactly the nominal rate, ours is the seeded Poisson draw itself, so both are also shown
  against the nominal rate.
- send lateness = send stamp − scheduled time (ms): ours from its records (``sent_ns`` −
  ``scheduled_ns``, exact); the anchor's send stamp is its request function's start
  (``RequestFuncOutput.start_time``) and its schedule is ``get_request``'s own delays,
  recomputed from the same seed. The anchor keeps its start time to itself, so its lateness
  is measured from its least-late request (a lower bound: that request counts as on time).
Target: achieved within 1 % of the schedule and lateness p99 < 2 ms at 500 req/s.
Run: ``python tests/benchmarks/bench_open_loop.py [--tiny] [--out DIR]``.
"""

from __future__ import annotations

from typing import Any

import drivers
import harness as h
import numpy as np
from anchors import vllm_get_request

from server.net.loop import run_event_loop

NAME = "open_loop"
TARGET_RATE = 500.0
TARGET_ACHIEVED = 0.01
TARGET_P99_MS = 2.0


def anchor_schedule_s(n: int, rate: float, seed: int) -> list[float]:
    """``get_request``'s delays for ``n`` requests at ``rate`` (burstiness 1, no ramp-up),
    drawn exactly as it draws them (``np.random.gamma`` one at a time after
    ``np.random.seed(seed)``), summed and scaled to end at n / rate."""
    np.random.seed(seed)
    theta = 1.0 / rate
    delays = [float(np.random.gamma(shape=1.0, scale=theta)) for _ in range(n)]
    for i in range(1, n):
        delays[i] += delays[i - 1]
    factor = (n / rate) / delays[-1]
    return [d * factor for d in delays]


def _figures(
    sent_s: list[float], sched_s: list[float], lateness_ms: list[float], rate: float
) -> dict[str, Any]:
    n = len(sent_s)
    achieved = (n - 1) / (max(sent_s) - min(sent_s))
    scheduled = (n - 1) / (max(sched_s) - min(sched_s))
    return {
        "requests": n,
        "achieved_rps": round(achieved, 2),
        "scheduled_rps": round(scheduled, 2),
        "achieved_vs_schedule": round(achieved / scheduled - 1, 5),
        "achieved_vs_nominal": round(achieved / rate - 1, 5),
        "lateness_ms": lateness_ms,
    }


#: rate (req/s, as text) → client → per round, its :func:`_figures`
Results = dict[str, dict[str, list[dict[str, Any]]]]


async def _round(
    url: str, rate: float, n: int, seed: int, have_anchor: bool, per: dict[str, list[Any]]
) -> None:
    """One round at ``rate``: ``n`` requests from ours, then from the anchor (when installed),
    each one's figures appended to ``per``."""
    out = await drivers.ours(url, n, rate_rps=rate, seed=seed, max_tokens=16)
    assert out.failed == 0
    recs = [r for r in out.records if r["sent_ns"] is not None]
    per["ours"].append(
        _figures(
            [r["sent_ns"] / 1e9 for r in recs],
            [r["scheduled_ns"] / 1e9 for r in recs],
            [(r["sent_ns"] - r["scheduled_ns"]) / 1e6 for r in recs],
            rate,
        )
    )
    if not have_anchor:
        return
    out = await drivers.anchor(url, n, rate_rps=rate, seed=seed, max_tokens=16, warm=int(rate))
    assert out.failed == 0
    sched = anchor_schedule_s(n, rate, seed)
    start = min(s - d for s, d in zip(out.sent_s, sched, strict=True))
    late = [(s - d - start) * 1e3 for s, d in zip(out.sent_s, sched, strict=True)]
    per["anchor"].append(_figures(out.sent_s, sched, late, rate))
    h.progress(
        f"  {rate:g} req/s: ours p99 lateness "
        f"{h.pct(per['ours'][-1]['lateness_ms'], 0.99):.2f} ms, anchor "
        f"{h.pct(late, 0.99):.2f} ms"
    )


def _summary(results: Results) -> dict[str, Any]:
    """Per rate and client: lateness over all rounds, and each round's rate figures."""
    summary: dict[str, Any] = {}
    for rate, per in results.items():
        summary[rate] = {}
        for name, rs in per.items():
            if not rs:
                continue
            late = [x for r in rs for x in r["lateness_ms"]]
            summary[rate][name] = {
                "lateness_ms": h.dist(late),
                "achieved_rps": [r["achieved_rps"] for r in rs],
                "scheduled_rps": [r["scheduled_rps"] for r in rs],
                "achieved_vs_schedule": [r["achieved_vs_schedule"] for r in rs],
                "achieved_vs_nominal": [r["achieved_vs_nominal"] for r in rs],
            }
    return summary


def _rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per rate: the worst round's achieved − scheduled rate (%), then send lateness (ms)."""
    rows = []
    for rate in summary:
        ours_s = summary[rate]["ours"]
        anchor_s = summary[rate].get("anchor")
        is_target = float(rate) == TARGET_RATE
        worst = max(abs(x) for x in ours_s["achieved_vs_schedule"])
        rows.append(
            h.row(
                f"achieved − scheduled rate (worst round), {rate} req/s",
                round(worst * 100, 2),
                round(max(abs(x) for x in anchor_s["achieved_vs_schedule"]) * 100, 2)
                if anchor_s
                else None,
                "within 1 %" if is_target else "",
                worst <= TARGET_ACHIEVED if is_target else None,
                "%",
            )
        )
        for q in ("p50", "p99", "max"):
            ours_v = ours_s["lateness_ms"][q]
            target = is_target and q == "p99"
            rows.append(
                h.row(
                    f"send lateness {q}, {rate} req/s",
                    ours_v,
                    anchor_s["lateness_ms"][q] if anchor_s else None,
                    f"< {TARGET_P99_MS:g} ms" if target else "",
                    (ours_v is not None and ours_v < TARGET_P99_MS) if target else None,
                    "ms",
                )
            )
    return rows


def run(tiny: bool) -> dict[str, Any]:
    rates = (100.0,) if tiny else (100.0, 500.0, 1000.0)
    seconds = 0.3 if tiny else 10.0
    rounds = 1 if tiny else 2
    have_anchor = vllm_get_request() is not None
    results: Results = {}
    with h.FakeServer() as server:
        server.configure(0, 0)

        async def measure() -> None:
            seed = 0
            for rate in rates:
                per = results.setdefault(f"{rate:g}", {"ours": [], "anchor": []})
                for _ in range(rounds):
                    seed += 1
                    await _round(server.url, rate, int(rate * seconds), seed, have_anchor, per)

        run_event_loop(measure())
    summary = _summary(results)
    return {
        "config": {
            "rates_rps": list(rates),
            "seconds_per_round": seconds,
            "rounds": rounds,
            "tokens": 16,
        },
        "anchor_available": have_anchor,
        "rows": _rows(summary),
        "summary": summary,
    }


if __name__ == "__main__":
    h.bench_main(NAME, run)
