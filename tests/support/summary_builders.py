"""Hand-made typed summaries for verdict tests: only the fields a test sets carry values."""

from __future__ import annotations

from typing import Any

from analysis.models import CaseSummary, PhaseSummary, Stats


def phase(name: str, **fields: Any) -> PhaseSummary:
    """A phase summary with empty figures except ``fields`` (``ttft_ms`` may be a dict)."""
    for key in ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms"):
        if isinstance(fields.get(key), dict):
            fields[key] = Stats(**fields[key])
    base: dict[str, Any] = {
        "phase": name,
        "requests": 0,
        "ok": 0,
        "failed": 0,
        "aborted": 0,
        "not_sent": 0,
        "duration_s": None,
        "output_tokens": 0,
        "output_throughput_tok_s": None,
        "request_throughput_req_s": None,
        "prompt_tokens": 0,
        "cached_tokens": 0,
    }
    return PhaseSummary(**(base | fields))


def case(name: str, *phases: PhaseSummary, **fields: Any) -> CaseSummary:
    """A case summary holding ``phases`` (status ok unless given)."""
    return CaseSummary(
        name=name, status=fields.pop("status", "ok"), phases={p.phase: p for p in phases}, **fields
    )
