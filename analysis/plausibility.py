"""Records that cannot be true: the plausibility part of the integrity rule
(``analysis.integrity``), made with or without a manifest, so no report publishes them.

A record is implausible when (each a *kind*, reported once per case with its count and one
example, the worst for stamps):

- **stamps outside their phase**: its send, first token or end lies more than
  :data:`STAMP_TOLERANCE_NS` (1 s, plus a worker's measured clock-offset bound) before its
  phase's ``phases.jsonl`` window starts or after it ends. The window is the writer's own:
  ``start_ns`` is the first send and ``end_ns`` comes after the last end and the settle
  wait, so every true stamp lies inside it; the tolerance absorbs the stamps of a phase cut
  short, whose row is written as it stops;
- **not as planned**: its request id, prompt length or ``max_tokens`` is not the plan's for
  its phase and index (the plan's request headers, ``scenarios.workloads.materialize``);
- **usage beyond the plan's limits**: an ``ok`` record whose final usage counts more output
  tokens than ``max_tokens``, or, for a prompt sent as token IDs, another prompt length than
  was sent; any record whose prompt usage exceeds its server's whole KV cache (vLLM refuses
  to start with a context longer than its cache, so no prompt can be longer);
- **usage that disagrees with the streamed tokens**: an ``ok`` record without a final usage
  or whose streamed tokens do not sum to it; any record whose ``excess_tokens`` is not what
  its usage and stream give (``loadgen.runformat.rows.excess_tokens``);
- **ok without HTTP 200**: status ``ok`` with another HTTP status, or none.

The client marks a record ``ok`` only when these hold (``loadgen.client``), so a record that
breaks one was not written by it as it stands: an edited file, or a reader's bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from analysis.load import CaseData
from loadgen.runformat import PhaseRow, ReadRecord
from loadgen.runformat.rows import excess_tokens
from scenarios.plan import Plan
from scenarios.requests import PhaseRequests
from scenarios.workloads import materialize

#: How far a stamp may lie outside its phase's window (ns): 1 s.
STAMP_TOLERANCE_NS = 1_000_000_000

#: A check of one record: why it is implausible, or ``None``.
Check = Callable[[ReadRecord], str | None]


@dataclass(frozen=True)
class Kind:
    """One kind of implausible record: what the report's line calls it, and its check."""

    what: str
    check: Check


def case_problems(case: CaseData, plan: Plan) -> list[str]:
    """One line per kind of implausible record in ``case`` (module docstring):
    ``CASE: N record(s) WHAT, e.g. ID: DETAIL``; empty when every record can be true."""
    planned = PlannedHeaders(case, plan)
    capacity = _capacity_tokens(case)
    kinds = [
        Kind(f"with stamps outside their phase (by more than "
             f"{STAMP_TOLERANCE_NS / 1e9:g} s)", _stamps_check(case)),
        Kind("not as planned", planned.not_as_planned),
        Kind("with usage beyond the plan's limits",
             lambda r: _beyond_limits(r, planned, capacity)),
        Kind("whose usage disagrees with the streamed tokens", _disagrees),
        Kind("with status ok but no HTTP 200", _ok_without_200),
    ]  # fmt: skip
    return [line for kind in kinds if (line := _line(case.name, kind, case.records))]


def _line(case: str, kind: Kind, records: Iterable[ReadRecord]) -> str | None:
    found = [(r.request_id, why) for r in records if (why := kind.check(r)) is not None]
    if not found:
        return None
    rid, why = found[0]
    return f"{case}: {len(found)} record(s) {kind.what}, e.g. {rid}: {why}"


def _stamps_check(case: CaseData) -> Check:
    rows: dict[str, PhaseRow] = {row.phase: row for row in case.phases}
    bounds: dict[tuple[str, int | None], int] = {
        (o.phase, o.worker): o.bound_ns for o in case.clock_offsets
    }

    def check(r: ReadRecord) -> str | None:
        row = rows.get(r.phase)
        if row is None:
            return None  # a phase none of whose requests was sent has no window
        tolerance = STAMP_TOLERANCE_NS + bounds.get((r.phase, r.worker), 0)
        worst: tuple[int, str] | None = None
        first = r.chunk_ns[0] if r.chunk_ns else None
        for name, stamp in (("sent", r.sent_ns), ("first token", first), ("ended", r.end_ns)):
            if stamp is None:
                continue
            for by, where in ((row.start_ns - stamp, "before the phase began"),
                              (stamp - row.end_ns, "after the phase ended")):  # fmt: skip
                if by > tolerance and (worst is None or by > worst[0]):
                    worst = (by, f"{name} {by / 1e9:.3f} s {where}")
        return None if worst is None else worst[1]

    return check


class PlannedHeaders:
    """The plan's header of each record's request, from the plan alone
    (``scenarios.workloads.materialize``, headers only: no prompt is built)."""

    def __init__(self, case: CaseData, plan: Plan) -> None:
        spec = case.spec or next((c for c in plan.cases if c.name == case.name), None)
        self.plan = plan
        self.phases = {p.name: p for p in plan.phases_of(spec)} if spec is not None else {}
        self.built: dict[str, PhaseRequests | None] = {}
        self.top: dict[str, int] = {}
        for r in case.records:
            self.top[r.phase] = max(self.top.get(r.phase, 0), r.index)

    def requests(self, phase: str) -> PhaseRequests | None:
        """The phase's planned requests; ``None`` when the plan cannot give them (they are
        then not checked against it)."""
        if phase not in self.built:
            workload = self.phases[phase].workload
            if getattr(workload, "requests", 0) is None:
                # A duration-driven phase's count is resolved at run time: its records say
                # how many there were; each header depends on its index alone.
                workload = workload.model_copy(update={"requests": self.top[phase] + 1})
            try:
                self.built[phase] = materialize(workload, phase, self.plan.seed,
                                                self.plan.tokens, headers_only=True)  # fmt: skip
            except ValueError:
                self.built[phase] = None
        return self.built[phase]

    def not_as_planned(self, r: ReadRecord) -> str | None:
        """How ``r`` differs from its planned request, or ``None``."""
        if r.phase not in self.phases:
            return f"the plan has no phase {r.phase} for this case"
        planned = self.requests(r.phase)
        if planned is None:
            return None
        if not 0 <= r.index < len(planned):
            return f"phase {r.phase} plans {len(planned)} requests, not index {r.index}"
        h = planned.header(r.index)
        for name, got, want in (("request_id", r.request_id, h.request_id),
                                ("prompt_tokens_sent", r.prompt_tokens_sent, h.prompt_tokens),
                                ("max_tokens", r.max_tokens, h.max_tokens)):  # fmt: skip
            if got != want:
                return f"{name} {got}, planned {want}"
        return None

    def exact_prompt(self, r: ReadRecord) -> bool:
        """Whether ``r``'s prompt was sent as token IDs (``RequestHeader.exact_prompt``)."""
        planned = self.requests(r.phase) if r.phase in self.phases else None
        if planned is None or not 0 <= r.index < len(planned):
            return False  # unknown: not checked as exact
        return planned.header(r.index).exact_prompt


def _capacity_tokens(case: CaseData) -> int | None:
    capacity = (case.info.server or {}).get("capacity")
    tokens = capacity.get("tokens") if isinstance(capacity, dict) else None
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _beyond_limits(r: ReadRecord, planned: PlannedHeaders, capacity: int | None) -> str | None:
    prompt, output = r.usage_prompt_tokens, r.usage_completion_tokens
    if capacity is not None and prompt is not None and prompt > capacity:
        return f"usage.prompt_tokens {prompt} > the server's KV cache of {capacity} tokens"
    if r.status != "ok":
        return None
    if output is not None and output > r.max_tokens:
        return f"usage.completion_tokens {output} > max_tokens {r.max_tokens}"
    if prompt is not None and prompt != r.prompt_tokens_sent and planned.exact_prompt(r):
        return f"usage.prompt_tokens {prompt}, {r.prompt_tokens_sent} prompt tokens sent"
    return None


def _disagrees(r: ReadRecord) -> str | None:
    if r.status == "ok" and r.usage_completion_tokens is None:
        return "status ok without a final usage"
    if r.status == "ok" and r.output_tokens != r.usage_completion_tokens:
        return (f"{r.output_tokens} token(s) streamed, usage.completion_tokens "
                f"{r.usage_completion_tokens}")  # fmt: skip
    expected = excess_tokens(r)
    if r.excess_tokens != expected:
        return f"excess_tokens {r.excess_tokens}, its usage and stream give {expected}"
    return None


def _ok_without_200(r: ReadRecord) -> str | None:
    if r.status == "ok" and r.http_status != 200:
        return f"HTTP {r.http_status}" if r.http_status is not None else "no HTTP status"
    return None
