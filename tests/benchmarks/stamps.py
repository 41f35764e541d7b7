"""Client stamps against the fake server's write log (pure: dicts in, figures out).

Both clients stamp on CLOCK_MONOTONIC and the fake server logs each token event's write on it
too (one clock for every process of the machine), so per token ``k`` of a request:

- **token stamp error** ``e_k`` = client stamp of token k − the server's write of event k
  (the wire, the client's loop, its parsing; a stamp that carried several tokens is the
  late stamp of every token but its last);
- **TTFT stamp error** = ``e_0``, the error a TTFT figure carries;
- **ITL stamp error** = ``e_k − e_{k−1}`` (k ≥ 1) = client gap − server gap, the error an ITL
  figure carries;
- **server lateness** = write of event k − its deadline ``start + k·ITL`` (the server's own
  share: it spins to its deadlines on its own core).

A request's first ``concurrency`` requests of a closed loop (sent at once) are its *first
wave*; the rest are *steady*.
"""

from __future__ import annotations

import itertools
from typing import Any

import drivers
import harness as h


def request_errors(p: dict[str, Any], srv: dict[str, Any]) -> dict[str, Any] | None:
    """One request's errors (ms): ``ttft``, ``token`` (list), ``itl`` (list), ``lateness``
    (list), and ``coalesced``: its stamps that carried more than one token, out of
    ``stamps``. ``None`` when the log has no write times or counts differ from the stamps."""
    writes = srv.get("writes_ns")
    stamps = p["stamps_ns"]
    if not writes or len(writes) != len(stamps):
        return None
    token = [(s - w) / 1e6 for s, w in zip(stamps, writes, strict=True)]
    start, itl = srv["start_ns"], srv["itl_ns"]
    return {
        "ttft": token[0],
        "token": token,
        "itl": [b - a for a, b in itertools.pairwise(token)],
        "lateness": [(w - (start + k * itl)) / 1e6 for k, w in enumerate(writes)],
        "coalesced": sum(1 for k in p["stamp_tokens"] if k > 1),
        "stamps": len(p["stamp_tokens"]),
    }


def run_errors(
    out: drivers.Outcome, log: dict[int, dict[str, Any]], concurrency: int
) -> dict[str, dict[str, Any]]:
    """A run's errors pooled per wave (``first``, ``steady``): lists ``ttft``, ``token``,
    ``itl``, ``lateness`` (ms), counts ``coalesced``/``stamps``, and ``unmatched``
    (requests whose stamps could not be paired with the log)."""
    waves: dict[str, dict[str, Any]] = {
        w: {"ttft": [], "token": [], "itl": [], "lateness": [], "coalesced": 0, "stamps": 0,
            "unmatched": 0}
        for w in ("first", "steady")
    }  # fmt: skip
    for p in out.per_request:
        wave = waves["first" if p["index"] < concurrency else "steady"]
        srv = log.get(p["key"])
        errors = None if srv is None else request_errors(p, srv)
        if errors is None:
            wave["unmatched"] += 1
            continue
        wave["ttft"].append(errors["ttft"])
        for key in ("token", "itl", "lateness"):
            wave[key] += errors[key]
        wave["coalesced"] += errors["coalesced"]
        wave["stamps"] += errors["stamps"]
    return waves


def pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' waves (:func:`run_errors` of one wave each) pooled into one."""
    out: dict[str, Any] = {"ttft": [], "token": [], "itl": [], "lateness": [], "coalesced": 0,
                           "stamps": 0, "unmatched": 0}  # fmt: skip
    for r in runs:
        for key, value in r.items():
            out[key] += value
    return out


def summary(wave: dict[str, Any]) -> dict[str, Any]:
    """A pooled wave's distributions (count, p50, p99, max per list) and its coalesced
    share (stamps that carried more than one token / stamps)."""
    return {
        **{k: h.dist(wave[k]) for k in ("ttft", "token", "itl", "lateness")},
        "coalesced_share": round(wave["coalesced"] / wave["stamps"], 4) if wave["stamps"] else None,
        "unmatched": wave["unmatched"],
    }
