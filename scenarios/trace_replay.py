"""trace-replay: send a Mooncake-format trace (or multi-turn sessions) on its own clock and
check the server's prefix-cache hit rate against what the trace should get.

Cases are cache sizes (``--cache 1GiB,4GiB``: one server each); phases are speedups
(``--speedup 0.5,1,2``: the slice replayed ``speedup`` times faster). Every phase replays the
same slice, its blocks drawn under its own salt (the phase name), so no phase hits the
blocks of another and each starts from a cache holding nothing it can use.

What a request is: its trace line's lengths and hash ids, scaled by ``--token-scale``
(``scenarios.trace_scale.scale_trace``: lengths and the block size shrink together), its prompt
built block by block (``scenarios.traces.prompt_token_ids``), its output exact
(``max_tokens`` with ``ignore_eos``). Its id is ``{phase}-L{line}``: the trace line it came
from.

When: a timed request at (timestamp − the slice's first timestamp) ÷ speedup after the phase
start, on the open loop's absolute schedule; a session's later turn its delay ÷ speedup
after the END of the turn before (``--no-compress-delays``: the delay as written), so a
session is a closed loop and sessions are open to each other.

Slice: ``--window START-END`` in trace time (``960s-1023s``, ``500ms-90s`` or bare
milliseconds; START inclusive, END exclusive; ``all`` for the whole file), then
``--max-requests N`` keeps the first N requests of it (file order). A later session turn is
in the slice when the turn before it is.

Too long for the server (prompt + output > ``max_model_len``, the value the case's server
is started with; for an attached server ``--max-model-len`` must give its own):
``--too-long skip`` leaves the request out, ``truncate`` cuts its prompt to
``max_model_len − output`` tokens (its hash ids to the blocks that remain); either way the
plan's sizing counts and names them. A session turn after a skipped one is skipped too (it
would follow a turn never sent).

The defaults (the sample's last minute, ``--token-scale 1/32``, speedup 0.5) and the
measurements behind them are in docs/scenarios/trace-replay.md ("Defaults, and why").
Without ``--trace`` the run replays the built-in fleet workload
(:mod:`scenarios.fleet.workload`), all of it, unscaled, at speedup 1 unless given.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from scenarios.arrivals import TraceArrival
from scenarios.base import Scenario
from scenarios.checks import Check, CheckSpec
from scenarios.common import (
    MAX_RATIO,
    MAX_REQUESTS,
    MAX_SPEEDUP,
    MAX_TOKENS,
    MAX_WAIT_S,
    HttpUrlText,
    RunParams,
)
from scenarios.fleet import workload
from scenarios.fleet_cases import (
    FleetKillParams,
    FleetParams,
    fleet_cases,
    fleet_checks,
    fleet_comparisons,
)
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.trace_scale import parse_token_scale, scale_trace
from scenarios.traces import MOONCAKE_BLOCK_TOKENS, Trace, TraceRequest, load_trace
from scenarios.values import (
    SizesText,
    SLOText,
    SpeedupsText,
    exact_label,
    parse_duration,
    parse_sizes,
    parse_speedups,
)
from scenarios.workloads import TraceItem, TracePrompts
from server.capacity import KVCapacity
from server.sizes import format_size

#: Lines named in the plan's sizing for skipped/truncated requests (the counts are complete).
LISTED_LINES = 20


def _trace_time_ms(text: str) -> float:
    return parse_duration(text, unit="ms", zero_ok=True, max_s=None, what="trace time",
                          example="960s, 500ms, 16m or 90000 (ms)")  # fmt: skip


def parse_window(text: str) -> tuple[float, float] | None:
    """``"960s-1023s"`` → (960000.0, 1023000.0) ms of trace time; ``"all"`` → ``None``.

    A bare number is milliseconds (the trace's own unit). START is inclusive, END exclusive.

    Raises:
        ValueError: not ``START-END`` with END > START ≥ 0.
    """
    if text.strip().lower() == "all":
        return None
    start, sep, end = text.partition("-")
    if not sep:
        raise ValueError(f"window {text!r}: expected START-END, e.g. 960s-1023s, or all")
    lo, hi = _trace_time_ms(start), _trace_time_ms(end)
    if hi <= lo:
        raise ValueError(f"window {text!r}: its end must be after its start")
    return lo, hi


def phase_name(speedup: float) -> str:
    """The phase of one speedup: ``speedup-0.5x`` (two speedups never share a name:
    ``scenarios.values.exact_label``)."""
    return f"speedup-{exact_label(speedup)}x"


@functools.lru_cache(maxsize=1)
def _builtin() -> Trace:
    return workload.fleet_workload_trace()


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int, block_tokens: int) -> Trace:
    return load_trace(Path(path), block_tokens=block_tokens)


#: What a run without a trace replays of the built-in fleet workload unless told otherwise.
BUILTIN_DEFAULTS = {
    "window": "all",
    "token_scale": "1",
    "speedup": "1",
    "trace_block_tokens": workload.BLOCK_TOKENS,
}


def read_trace(path: str | None, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """``load_trace`` once per file version (path, mtime, size): parameter validation, the
    nominal plan and the real plan all read the same file. ``None``: the built-in fleet
    workload (:func:`scenarios.fleet.workload.fleet_workload_trace`; ``block_tokens`` is its
    own).

    Raises:
        scenarios.traces.TraceError: unreadable file or a bad line (named with its number).
    """
    if path is None:
        return _builtin()
    try:
        st = os.stat(path)
    except OSError:
        return load_trace(Path(path), block_tokens=block_tokens)  # raises its TraceError
    return _load_cached(os.path.abspath(path), st.st_mtime_ns, st.st_size, block_tokens)


# --- Checks (evaluated in analysis.reports.trace_replay) -----------------------------------


class TraceHitRatePredicted(CheckSpec):
    """|measured counter hit rate − predicted hit rate| ≤ ``tolerance`` (absolute, 0–1) in
    ``phase``: measured = Δprefix_cache_hits ÷ Δprefix_cache_queries over the phase; predicted
    = ``scenarios.prefix_cache_model.predict_hits`` on the phase's requests with the case's
    real block count and block size, in the start/end order its records show."""

    kind: Literal["trace_hit_rate_predicted"] = "trace_hit_rate_predicted"
    families: ClassVar[tuple[str, ...]] = ("prefix_cache_hits", "prefix_cache_queries")
    phase: str
    tolerance: float = Field(ge=0, le=1)


class TraceRateKept(CheckSpec):
    """The timed requests of ``phase`` left at the scaled trace rate: achieved = (sent − 1) ÷
    (last send − first send) within ``max_rate_error`` (relative) of scheduled = (n − 1) ÷
    (last offset − first offset) with offsets ÷ speedup."""

    kind: Literal["trace_rate_kept"] = "trace_rate_kept"
    phase: str
    max_rate_error: float = Field(default=0.01, ge=0, le=MAX_RATIO)


class TraceSendLateness(CheckSpec):
    """Send lateness (sent − scheduled, ms) p99 of ``phase`` below ``max_p99_ms``."""

    kind: Literal["trace_send_lateness"] = "trace_send_lateness"
    phase: str
    max_p99_ms: float = Field(default=5.0, gt=0)


# --- Parameters -----------------------------------------------------------------------------


class TraceReplayParams(RunParams, FleetParams, FleetKillParams):
    """Knobs of trace-replay (each becomes a ``--flag``)."""

    # Before ``trace``: the trace's validation needs it.
    trace_block_tokens: int = Field(
        default=MOONCAKE_BLOCK_TOKENS,
        gt=0,
        le=MAX_TOKENS,
        description="Tokens per hash id in the trace file.",
    )
    trace: str | None = Field(
        default=None,
        description="Trace file (Mooncake JSONL, or sessions JSONL); validated whole first. "
        "None: the built-in fleet workload (docs/fleet.md), at its own window, scale and "
        "speedup unless given.",
    )
    cache: SizesText = Field(
        default="1GiB", description="KV cache size, or a list of them (1GiB,4GiB): one case each."
    )
    url: HttpUrlText | None = Field(
        default=None,
        description="Attach to this running server (one case; give its --max-model-len).",
    )
    speedup: SpeedupsText = Field(
        default="0.5",
        description="Trace clock speedup, or a list (0.5,1,2): one phase each, in order.",
    )
    token_scale: str = Field(
        default="1/32",
        description="Scale of every length and the trace's block (e.g. 1/32: 512-token "
        "blocks become 16).",
    )
    window: str = Field(
        default="960s-1023s",
        description="Trace-time slice START-END (960s-1023s, 500ms-90s, bare ms), or all.",
    )
    max_requests: int | None = Field(
        default=None, gt=0, le=MAX_REQUESTS, description="Keep the first N requests of the slice."
    )
    too_long: Literal["skip", "truncate"] = Field(
        default="skip",
        description="Requests longer than max_model_len: skip them or truncate their prompt "
        "(counted either way).",
    )
    compress_delays: bool = Field(
        default=True, description="Divide session think delays by the speedup too."
    )
    slo: SLOText = Field(
        default="ttft=2s,tpot=250ms",
        description="SLOs a good request meets (≤), as slo-goodput: ttft=…,tpot=…[,e2el=…].",
    )
    attainment: float = Field(
        default=0.9, gt=0, le=1, description="SLO attainment a sustainable speedup reaches."
    )
    target_speedup: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SPEEDUP,
        description="Planned growth of the traffic (× the trace's rate): replicas it needs.",
    )
    hit_rate_tolerance: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Allowed |measured − predicted| prefix-cache hit rate (absolute).",
    )
    max_rate_error: float = Field(
        default=0.01,
        ge=0,
        le=MAX_RATIO,
        description="Allowed relative error of the achieved request rate.",
    )
    max_lateness_p99_ms: float = Field(
        default=5.0, gt=0, le=MAX_WAIT_S * 1000, description="Allowed send lateness p99 (ms)."
    )

    @model_validator(mode="before")
    @classmethod
    def _builtin_defaults(cls, data: Any) -> Any:
        """Without a trace, the built-in fleet workload's own slice, scale and speedup (all of
        it, as written, at its own pace) where they were not given."""
        if isinstance(data, dict) and data.get("trace") is None:
            return {**BUILTIN_DEFAULTS, **data}
        return data

    @field_validator("trace")
    @classmethod
    def _trace_readable(cls, value: str | None, info: ValidationInfo) -> str | None:
        # TraceError (a ValueError) names the bad line; a bad block size fails on its own.
        if value is not None and "trace_block_tokens" in info.data:
            read_trace(value, info.data["trace_block_tokens"])
        return value

    @field_validator("token_scale")
    @classmethod
    def _scale(cls, value: str) -> str:
        parse_token_scale(value)
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        parse_window(value)
        return value

    @model_validator(mode="after")
    def _one_attached_server(self) -> TraceReplayParams:
        if self.url and len(parse_sizes(self.cache)) > 1:
            raise ValueError("url attaches one server: give one cache size (or none) with it")
        return self

    @model_validator(mode="after")
    def _slice_not_empty(self) -> TraceReplayParams:
        if "trace" in self.__dict__:  # the field validator passed
            select(self)  # raises on an empty slice or a bad scale
        return self


# --- The slice ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The requests one phase sends, and what was left out or cut on the way.

    Attributes:
        trace: the scaled trace.
        requests: the slice's requests that are sent, in file order (lengths final).
        offsets_ms: per request, trace ms from the slice's first timestamp (``None`` for a
            later session turn).
        follows: per request, the index (in ``requests``) of the turn it follows.
        in_slice: requests the window and ``max_requests`` picked (before the length rule).
        skipped_lines / truncated_lines: trace lines left out / cut by the length rule.
        first_timestamp_ms: trace time of the slice's first timed request.
    """

    trace: Trace
    requests: tuple[TraceRequest, ...]
    offsets_ms: tuple[float | None, ...]
    follows: tuple[int | None, ...]
    in_slice: int
    skipped_lines: tuple[int, ...]
    truncated_lines: tuple[int, ...]
    first_timestamp_ms: float


def _fit(request: TraceRequest, block: int, max_model_len: int, mode: str) -> TraceRequest | None:
    """``request`` as sent under the length rule: unchanged, truncated, or ``None`` (skip)."""
    if request.input_length + request.output_length <= max_model_len:
        return request
    keep = max_model_len - request.output_length
    if mode == "skip" or keep < 1:
        return None
    return TraceRequest(
        line=request.line,
        timestamp_ms=request.timestamp_ms,
        input_length=keep,
        output_length=request.output_length,
        hash_ids=request.hash_ids[: math.ceil(keep / block)],
        session_id=request.session_id,
        turn=request.turn,
        delay_ms=request.delay_ms,
    )


def select(p: TraceReplayParams) -> Selection:
    """The slice of ``p.trace`` one phase sends (module docstring: window, max requests,
    too-long rule).

    Raises:
        scenarios.traces.TraceError: a bad trace line.
        ValueError: a scale that does not divide the block, or a slice with no request left.
    """
    trace = scale_trace(read_trace(p.trace, p.trace_block_tokens), parse_token_scale(p.token_scale))
    window = parse_window(p.window)
    picked: list[TraceRequest] = []
    last_turn_in: dict[str, int] = {}  # session → turn of its last picked request
    for r in trace.requests:
        if r.timestamp_ms is not None:
            if window is not None and not window[0] <= r.timestamp_ms < window[1]:
                continue
        elif r.session_id is None or last_turn_in.get(r.session_id) != r.turn - 1:
            continue  # a later turn whose previous turn is not in the slice
        if p.max_requests is not None and len(picked) >= p.max_requests:
            break
        picked.append(r)
        if r.session_id is not None:
            last_turn_in[r.session_id] = r.turn
    if not picked:
        where = "the trace" if window is None else f"window {p.window}"
        raise ValueError(f"{p.trace or workload.BUILTIN_FLEET_WORKLOAD}: no request in {where}")
    sent: list[TraceRequest] = []
    offsets: list[float | None] = []
    follows: list[int | None] = []
    skipped: list[int] = []
    truncated: list[int] = []
    index_of_turn: dict[tuple[str, int], int] = {}
    first_ts = min(r.timestamp_ms for r in picked if r.timestamp_ms is not None)
    for r in picked:
        before: int | None = None
        if r.timestamp_ms is None:
            assert r.session_id is not None
            before = index_of_turn.get((r.session_id, r.turn - 1))
            if before is None:  # the turn before was skipped
                skipped.append(r.line)
                continue
        fitted = _fit(r, trace.block_tokens, p.max_model_len, p.too_long)
        if fitted is None:
            skipped.append(r.line)
            continue
        if fitted is not r:
            truncated.append(r.line)
        if r.session_id is not None:
            index_of_turn[(r.session_id, r.turn)] = len(sent)
        offsets.append(None if r.timestamp_ms is None else r.timestamp_ms - first_ts)
        follows.append(before)
        sent.append(fitted)
    if not sent:
        raise ValueError(
            f"{p.trace or workload.BUILTIN_FLEET_WORKLOAD}: all {len(picked)} requests of the "
            f"slice are longer than max_model_len "
            f"{p.max_model_len} at token scale {p.token_scale}; lower --token-scale"
        )
    return Selection(
        trace=trace,
        requests=tuple(sent),
        offsets_ms=tuple(offsets),
        follows=tuple(follows),
        in_slice=len(picked),
        skipped_lines=tuple(skipped),
        truncated_lines=tuple(truncated),
        first_timestamp_ms=first_ts,
    )


def scheduled_rate_rps(selection: Selection, speedup: float) -> float | None:
    """Timed requests per second the phase of ``speedup`` is scheduled to send: (n − 1) ÷
    ((last − first offset) ÷ speedup); ``None`` with fewer than two timed requests or a
    zero span."""
    offsets = [o for o in selection.offsets_ms if o is not None]
    span_ms = max(offsets) - min(offsets) if offsets else 0.0
    if len(offsets) < 2 or span_ms <= 0:
        return None
    return (len(offsets) - 1) / (span_ms / 1e3 / speedup)


class TraceReplay(Scenario[TraceReplayParams]):
    name: ClassVar[str] = "trace-replay"
    summary: ClassVar[str] = (
        "Replay a Mooncake-format trace (or sessions) on its own clock, sped up per phase: "
        "prefix-cache hit rate against the model's prediction, latency and goodput under "
        "SLOs, and the highest speedup that meets them (replicas for a growth factor)."
    )
    Params = TraceReplayParams
    single_process_reason: ClassVar[str | None] = (
        "a session's next turn is sent after its previous turn ends, which only the process "
        "that sent that turn sees; and the hit-rate prediction follows one start/end order"
    )

    def _case(self, p: TraceReplayParams, cache: int) -> CaseSpec:
        if p.url:
            return CaseSpec(name="attached", url=p.url, label=f"attached {p.url}")
        return CaseSpec(
            name=format_size(cache), server=p.server(cache), label=f"cache {format_size(cache)}"
        )

    def _cases(self, p: TraceReplayParams) -> tuple[CaseSpec, ...]:
        """A case per cache size; a fleet run's case per cache size and routing policy."""
        caches = parse_sizes(p.cache)[:1] if p.url else parse_sizes(p.cache)
        cases = [self._case(p, c) for c in caches]
        if not p.is_fleet:
            return tuple(cases)
        prefix = len(cases) > 1
        return tuple(
            fleet_case
            for case in cases
            if case.server is not None
            for fleet_case in fleet_cases(p, case.server, case.name if prefix else "", case.label)
        )

    def sizing_case(self, p: TraceReplayParams) -> CaseSpec:
        return self._cases(p)[0]

    def plan(self, p: TraceReplayParams, capacity: KVCapacity) -> Plan:
        sel = select(p)
        speedups = parse_speedups(p.speedup)
        phases = tuple(_phase(p, sel, s) for s in speedups)
        cases = p.with_kill_case(self._cases(p), phases)
        checks: list[Check] = []
        for case in cases:
            for phase in case.phases or phases:
                # A replica killed mid-phase: the model does not know when the gateway's
                # breaker opened, so the phase's hit rate is reported, not judged.
                if not phase.faults:
                    checks.append(
                        TraceHitRatePredicted(
                            case=case.name, phase=phase.name, tolerance=p.hit_rate_tolerance
                        )
                    )
                checks += [
                    TraceRateKept(
                        case=case.name, phase=phase.name, max_rate_error=p.max_rate_error
                    ),
                    TraceSendLateness(
                        case=case.name, phase=phase.name, max_p99_ms=p.max_lateness_p99_ms
                    ),
                ]
        checks += fleet_checks(cases)
        if p.is_fleet:
            caches = parse_sizes(p.cache)
            for size in caches:
                prefix = format_size(size) if len(caches) > 1 else ""
                checks += fleet_comparisons(p, prefix, [ph.name for ph in phases])
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing=_sizing(p, sel, speedups, capacity),
            cases=cases,
            phases=phases,
            checks=tuple(checks),
            **p.plan_fields(),
        )


def _phase(p: TraceReplayParams, sel: Selection, speedup: float) -> PhaseSpec:
    """The phase that replays the selection ``speedup`` times faster than its trace."""
    trace = sel.trace
    items = tuple(
        TraceItem(
            line=r.line,
            input_tokens=r.input_length,
            output_tokens=r.output_length,
            hash_ids=r.hash_ids,
            session_id=r.session_id,
            turn=r.turn,
        )
        for r in sel.requests
    )
    return PhaseSpec(
        name=phase_name(speedup),
        workload=TracePrompts(
            trace_sha256=trace.sha256,
            token_scale=str(trace.token_scale),
            block_tokens=trace.block_tokens,
            salt=phase_name(speedup),
            items=items,
        ),
        arrival=TraceArrival(
            speedup=speedup,
            offsets_ms=sel.offsets_ms,
            follows=sel.follows,
            delays_ms=tuple(r.delay_ms for r in sel.requests),
            compress_delays=p.compress_delays,
        ),
        settle_s=p.settle_s,
    )


def _sizing(
    p: TraceReplayParams, sel: Selection, speedups: list[float], capacity: KVCapacity
) -> dict[str, Any]:
    """What the plan was sized from: the trace, the slice, what was skipped or truncated, the
    scheduled rates, the sizing server's capacity and the targets."""
    trace = sel.trace
    return {
        "trace_path": p.trace or workload.BUILTIN_FLEET_WORKLOAD,
        "trace_sha256": trace.sha256,
        "trace_kind": trace.kind,
        "trace_requests": len(trace.requests),
        "token_scale": str(trace.token_scale),
        "trace_block_tokens": trace.block_tokens,
        "window": p.window,
        "window_first_timestamp_ms": sel.first_timestamp_ms,
        "slice_span_ms": max(o for o in sel.offsets_ms if o is not None),
        "in_slice": sel.in_slice,
        "sent_per_phase": len(sel.requests),
        "sessions": len({r.session_id for r in sel.requests if r.session_id is not None}),
        "too_long": p.too_long,
        "max_model_len": p.max_model_len,
        "skipped": len(sel.skipped_lines),
        "skipped_lines": list(sel.skipped_lines[:LISTED_LINES]),
        "truncated": len(sel.truncated_lines),
        "truncated_lines": list(sel.truncated_lines[:LISTED_LINES]),
        "prompt_tokens_per_phase": sum(r.input_length for r in sel.requests),
        "output_tokens_per_phase": sum(r.output_length for r in sel.requests),
        "scheduled_rate_rps": {phase_name(s): scheduled_rate_rps(sel, s) for s in speedups},
        "sizing_capacity_tokens": capacity.tokens,
        "sizing_block_size": capacity.block_size,
        "slo": p.slo,
        "attainment": p.attainment,
        "target_speedup": p.target_speedup,
        "hit_rate_tolerance": p.hit_rate_tolerance,
    }
