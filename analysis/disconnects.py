"""What client disconnects did to the server: time to free, wasted tokens, zombie time.

From the request records (send, disconnect and end stamps) and the 250 ms samples, per phase:

- **open clients** at t = requests sent at or before t whose connection (until disconnect or
  end) is still open at t;
- **time to free** = first scrape at or after the last disconnect where
  ``num_requests_running`` ≤ running before the phase + open clients, minus the last
  disconnect, in s. Sampled, so it is an upper bound with the scrape period's resolution;
- **wasted tokens** = Δ``generation_tokens`` over the phase window − tokens the clients
  received: tokens generated for nobody. The **orphan budget** is what the abandoned requests
  would still have generated (Σ max_tokens − received over disconnected requests);
- **zombie time** = time during which the server ran more requests than clients had open
  while no client was connected at all, in s;
- **KV release** = first scrape after the last disconnect where ``kv_cache_usage_perc`` is
  back to its value before the phase (+0.005), minus the last disconnect, in s.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from analysis.load import CaseData
from metrics.samples import counter_delta, series, value_at


def _open_clients(records: Sequence[dict[str, Any]], t: int) -> int:
    n = 0
    for r in records:
        sent = r.get("sent_ns")
        closed = r.get("disconnect_ns") or r.get("end_ns")
        if sent is not None and sent <= t and (closed is None or t < closed):
            n += 1
    return n


def _first_at_or_after(points: Sequence[tuple[int, float]], t_ns: int) -> float | None:
    """The first sampled value at or after ``t_ns`` (what the server showed right after)."""
    return next((v for t, v in points if t >= t_ns), None)


def disconnect_summary(case: CaseData, phase: dict[str, Any]) -> dict[str, Any] | None:
    """The figures of the module docstring for one phase, or ``None`` if nobody disconnected."""
    name = phase["phase"]
    records = [r for r in case.records if r.get("phase") == name]
    cut = [r for r in records if r.get("disconnect_ns")]
    if not cut:
        return None
    start, end = int(phase["start_ns"]), int(phase["end_ns"])
    last = max(int(r["disconnect_ns"]) for r in cut)
    running = series(case.samples, "num_requests_running")
    kv = series(case.samples, "kv_cache_usage_perc")
    run_base = value_at(running, start) or 0.0
    kv_base = value_at(kv, start) or 0.0

    time_to_free = None
    for t, v in running:
        if last <= t <= end and v <= run_base + _open_clients(records, t):
            time_to_free = (t - last) / 1e9
            break
    kv_release = next(
        ((t - last) / 1e9 for t, v in kv if last <= t <= end and v <= kv_base + 0.005), None
    )
    zombie_ns = 0
    window = [(t, v) for t, v in running if start <= t <= end]
    for (t0, v0), (t1, _) in pairwise(window):
        if v0 > run_base and _open_clients(records, t0) == 0:
            zombie_ns += t1 - t0

    received = sum(sum(r.get("chunk_tokens") or []) for r in records)
    generated = counter_delta(series(case.samples, "generation_tokens"), start, end)
    budget = sum(int(r["max_tokens"]) - sum(r.get("chunk_tokens") or []) for r in cut)
    wasted = None if generated is None else generated - received
    return {
        "phase": name,
        "requests": len(records),
        "disconnected": len(cut),
        "received_tokens_at_disconnect": sorted({sum(r.get("chunk_tokens") or []) for r in cut}),
        "last_disconnect_ns": last,
        "running_after_last_disconnect": _first_at_or_after(running, last),
        "time_to_free_s": time_to_free,
        "generation_tokens": generated,
        "received_tokens": received,
        "wasted_tokens": wasted,
        "orphan_budget_tokens": budget,
        "wasted_fraction": None if wasted is None or budget == 0 else wasted / budget,
        "zombie_s": zombie_ns / 1e9,
        "kv_after_last_disconnect": _first_at_or_after(kv, last),
        "kv_release_s": kv_release,
        "server_idle_after": phase.get("server_idle_after"),
    }


def section(cases: Sequence[CaseData]) -> dict[str, Any]:
    """Per case and phase: the disconnect figures (JSON-ready rows)."""
    rows = []
    for case in cases:
        for phase in case.phases:
            row = disconnect_summary(case, phase)
            if row is not None:
                rows.append({"case": case.name, **row})
    return {"rows": rows}
