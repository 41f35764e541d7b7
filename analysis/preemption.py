"""The KV-capacity hand calculation and the kv-preemption report section.

Hand calculation (SCENARIOS.md §5, kv-preemption), from a case's real capacity of N blocks of
B tokens (T = N·B tokens) and C requests of P prompt + O output tokens:

- initial working set = C·P tokens; headroom = T − C·P tokens; average growth per request
  before the cache is full = headroom / C tokens;
- final working set = C·(P + O) tokens, i.e. C·ceil((P + O)/B) blocks (block rounding: a
  request holds whole blocks, so a partly filled last block counts in full);
- vLLM reserves one block (the null block), so N − 1 blocks are usable, and
  ``kv_cache_usage_perc`` = used / (N − 1) (vLLM ``BlockPool.get_usage``);
- prediction: preemption iff the final working set in blocks exceeds N − 1; the expected
  KV-usage peak is min(1, final blocks / (N − 1)).
"""

from __future__ import annotations

import math
from typing import Any


def hand_calculation(
    capacity: dict[str, Any], concurrency: int, prompt_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """The hand calculation for one case (see module docstring); token and block counts.

    ``capacity`` is the case's ``KVCapacity`` as a dict (``tokens``, ``block_size``,
    ``num_blocks``); a missing block size is taken as 16 (vLLM's GPU default) and said so.
    """
    block = capacity.get("block_size") or 16
    tokens = int(capacity["tokens"])
    blocks = capacity.get("num_blocks") or tokens // block
    per_request_blocks = math.ceil((prompt_tokens + output_tokens) / block)
    initial = concurrency * prompt_tokens
    final_blocks = concurrency * per_request_blocks
    headroom = tokens - initial
    return {
        "capacity_tokens": tokens,
        "block_size": block,
        "block_size_assumed": capacity.get("block_size") is None,
        "capacity_blocks": blocks,
        "concurrency": concurrency,
        "initial_working_set_tokens": initial,
        "headroom_tokens": headroom,
        "growth_per_request_tokens": headroom / concurrency,
        "output_tokens_per_request": output_tokens,
        "final_working_set_tokens": concurrency * (prompt_tokens + output_tokens),
        "final_working_set_blocks": final_blocks,
        "usable_blocks": blocks - 1,
        "predicted_preemption": final_blocks > blocks - 1,
        "predicted_kv_peak": min(1.0, final_blocks / (blocks - 1)),
    }


def _phase(case: dict[str, Any]) -> dict[str, Any] | None:
    phases = list(case["phases"].values())
    return phases[0] if phases else None


def tradeoffs(rows: list[dict[str, Any]]) -> list[str]:
    """Sentences comparing each preempting case with each non-preempting one.

    Never a verdict from one metric: TTFT, TPOT and throughput are stated side by side.
    """
    out = []
    preempting = [r for r in rows if r["preemptions"]]
    calm = [r for r in rows if r["preemptions"] == 0]
    for a in preempting:
        for b in calm:
            parts = []
            for key, label, unit, better_low in (
                ("ttft_mean_ms", "TTFT mean", "ms", True),
                ("tpot_mean_ms", "TPOT mean", "ms", True),
                ("output_throughput_tok_s", "output throughput", "tok/s", False),
            ):
                x, y = a.get(key), b.get(key)
                if x is None or y is None:
                    continue
                worse = (x > y) if better_low else (x < y)
                parts.append(
                    f"{label} {x:.1f} vs {y:.1f} {unit} ({'worse' if worse else 'better'})"
                )
            if parts:
                out.append(
                    f"{a['case']} ({a['preemptions']:.0f} preemptions) vs {b['case']} (none): "
                    + "; ".join(parts)
                    + ". Judge on all of them, not on one."
                )
    return out


def section(report: dict[str, Any], plan_checks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-case hand calculation, comparison rows and trade-off sentences (JSON-ready)."""
    shapes = {c["case"]: c for c in plan_checks if c["kind"] == "preemption_as_predicted"}
    rows = []
    for name, case in report["cases"].items():
        phase = _phase(case)
        capacity = (case.get("server") or {}).get("capacity")
        shape = shapes.get(name)
        if phase is None or capacity is None or shape is None:
            continue
        calc = hand_calculation(
            capacity, shape["concurrency"], shape["prompt_tokens"], shape["output_tokens"]
        )
        peaks, deltas = phase["gauge_peaks"], phase["counter_deltas"]
        rows.append(
            {
                "case": name,
                "hand_calculation": calc,
                "kv_peak": peaks["kv_cache_usage_perc"],
                "preemptions": deltas["num_preemptions"],
                "running_peak": peaks["num_requests_running"],
                "waiting_peak": peaks["num_requests_waiting"],
                "ttft_mean_ms": phase["ttft_ms"]["mean"],
                "ttft_p95_ms": phase["ttft_ms"]["p95"],
                "tpot_mean_ms": phase["tpot_ms"]["mean"],
                "itl_p95_ms": phase["itl_ms"]["p95"],
                "e2el_p95_ms": phase["e2el_ms"]["p95"],
                "output_throughput_tok_s": phase["output_throughput_tok_s"],
                "wall_s": phase["duration_s"],
                "failed": phase["failed"],
            }
        )
    return {"rows": rows, "tradeoffs": tradeoffs(rows)}
