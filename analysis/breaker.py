"""The breaker episode: gateway transitions, faults, and goodput per second.

Transitions come from the gateway's log (``breaker URL: closed -> open at T s (reason)``, T on
the monotonic clock the whole run uses), faults from ``faults.jsonl``, requests from the
records (``upstream`` = the gateway's ``X-Gateway-Upstream`` header). **Goodput** here =
requests that completed successfully per second of the episode (no latency SLO applied).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from analysis.load import CaseData
from loadgen.rundir import FAULTS_FILE, GATEWAY_LOG, read_jsonl

_TRANSITION = re.compile(r"breaker (\S+): ([\w-]+) -> ([\w-]+) at ([\d.]+) s \((.*)\)")


def transitions(log_path: Path) -> list[dict[str, Any]]:
    """Breaker transitions from a gateway log: upstream, from, to, t_ns, reason."""
    if not log_path.exists():
        return []
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        m = _TRANSITION.search(line)
        if m:
            up, a, b, t, why = m.groups()
            out.append({"upstream": up.rstrip(":"), "from": a, "to": b,
                        "t_ns": int(float(t) * 1e9), "reason": why})  # fmt: skip
    return out


def episode(case: CaseData, case_dir: Path, phase: dict[str, Any]) -> dict[str, Any]:
    """Transitions, faults and per-second request outcomes of one phase (times in s from its
    start)."""
    start = int(phase["start_ns"])
    records = [r for r in case.records if r.get("phase") == phase["phase"]]
    faults = read_jsonl(case_dir / FAULTS_FILE)
    trans = transitions(case_dir / GATEWAY_LOG)
    seconds = max(1, math.ceil((int(phase["last_end_ns"]) - start) / 1e9))
    bins: list[dict[str, Any]] = [
        {"second": s, "ok": 0, "failed": 0, "by_upstream": {}} for s in range(seconds + 1)
    ]
    for r in records:
        if r.get("sent_ns") is None:
            continue
        b = bins[min(seconds, max(0, (int(r["sent_ns"]) - start) // 1_000_000_000))]
        ok = r.get("status") == "ok"
        b["ok" if ok else "failed"] += 1
        if ok and r.get("upstream"):
            b["by_upstream"][r["upstream"]] = b["by_upstream"].get(r["upstream"], 0) + 1

    def rel(t_ns: int) -> float:
        return (int(t_ns) - start) / 1e9

    ok_total = sum(1 for r in records if r.get("status") == "ok")
    by_upstream: dict[str, int] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("upstream"):
            by_upstream[r["upstream"]] = by_upstream.get(r["upstream"], 0) + 1
    return {
        "phase": phase["phase"],
        "requests": len(records),
        "ok": ok_total,
        "failed": len(records) - ok_total,
        "success_ratio": ok_total / len(records) if records else None,
        "goodput_req_s": ok_total / ((int(phase["last_end_ns"]) - start) / 1e9),
        "last_send_s": max((rel(r["sent_ns"]) for r in records if r.get("sent_ns")), default=None),
        "ok_by_upstream": by_upstream,
        # Every *_ns stamp also as *_s: seconds from the phase start.
        "faults": [
            {
                **f,
                **{k.removesuffix("_ns") + "_s": rel(v) for k, v in f.items() if k.endswith("_ns")},
            }
            for f in faults
        ],
        "transitions": [{**t, "t_s": rel(t["t_ns"])} for t in trans if t["t_ns"] >= start],
        "per_second": bins,
    }
