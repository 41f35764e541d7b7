"""The shapes of a run's files as the readers rely on them: what ``analysis.load`` checks every
JSON file and JSON-lines row against before anything computes with it.

A row is *well typed* when every field a reader uses has the type the writer gives it
(``loadgen.records.RequestRecord``, the phase rows of ``loadgen.execute``, the sample and
scrape lines of ``metrics.store`` / ``metrics.scraper``, ``loadgen.workers.base.ClockOffset``,
``gateway.events``): integers are JSON integers (a nanosecond stamp ``"x"`` or ``1.5`` is not
one), a count is never ``NaN``, a status is one of the known ones. Fields a reader does not use
may hold anything, and fields older runs did not write may be absent; unknown fields are kept.
Validation is strict (no coercion of ``"5"`` to 5) and by pydantic, over the row's dict, which
the reader keeps as it is.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

#: Strict types, every other key kept; ``NaN``/``inf`` refused except where a type allows it.
_CONFIG = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

Stamp = int | None


class RecordShape(TypedDict):
    """A line of ``requests.jsonl`` / ``requests.worker-K.jsonl``."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    request_id: str
    phase: str
    index: int
    status: Literal["ok", "error", "aborted", "not_sent"]
    prompt_tokens_sent: int
    max_tokens: int
    group: NotRequired[str | None]
    scheduled_ns: NotRequired[Stamp]
    admitted_ns: NotRequired[Stamp]
    sent_ns: NotRequired[Stamp]
    connection_ready_ns: NotRequired[Stamp]
    request_sent_ns: NotRequired[Stamp]
    headers_ns: NotRequired[Stamp]
    end_ns: NotRequired[Stamp]
    disconnect_ns: NotRequired[Stamp]
    chunk_ns: NotRequired[list[int] | None]
    chunk_tokens: NotRequired[list[int] | None]
    token_timing: NotRequired[str | None]
    http_status: NotRequired[int | None]
    error: NotRequired[str | None]
    usage_prompt_tokens: NotRequired[int | None]
    usage_completion_tokens: NotRequired[int | None]
    cached_tokens: NotRequired[int | None]
    upstream: NotRequired[str | None]


class PhaseShape(TypedDict):
    """A line of ``phases.jsonl``."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    phase: str
    start_ns: int
    last_end_ns: int
    end_ns: int
    loop_lag_max_ms: NotRequired[float | None]
    loop_lag_p99_ms: NotRequired[float | None]
    late_sends: NotRequired[int | None]
    requested_concurrency: NotRequired[int | None]
    post_scrape_start_ns: NotRequired[Stamp]
    server_idle_after: NotRequired[bool | None]
    interrupted: NotRequired[bool]
    workers: NotRequired[list[Any] | None]


class SampleShape(TypedDict):
    """A line of ``metrics/samples.jsonl``: ``value`` may be non-finite (dropped and counted
    by the reader, as older runs wrote ``NaN``)."""

    __pydantic_config__ = ConfigDict(strict=True, extra="allow", allow_inf_nan=True)  # type: ignore[misc]
    t_ns: int
    name: str
    value: float
    labels: NotRequired[dict[str, str] | None]


class ScrapeShape(TypedDict):
    """A line of ``metrics/scrapes.jsonl`` (older runs wrote ``ok`` instead of ``outcome``)."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    tick: NotRequired[int]
    outcome: NotRequired[str]
    ok: NotRequired[bool]
    late: NotRequired[bool]
    nan_dropped: NotRequired[int]
    duplicates_dropped: NotRequired[int]
    start_ns: NotRequired[Stamp]
    end_ns: NotRequired[Stamp]
    aliases: NotRequired[dict[str, str] | None]
    missing: NotRequired[list[str] | None]


class ClockOffsetShape(TypedDict):
    """A line of ``clock_offsets.jsonl``."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    phase: str
    worker: int
    offset_ns: int
    bound_ns: NotRequired[int]


class FaultShape(TypedDict):
    """A line of ``faults.jsonl`` (every ``*_ns`` stamp an integer, checked separately)."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    fault: str
    replica: int
    url: str
    startup_s: NotRequired[float | None]


class EventShape(TypedDict):
    """A line of ``gateway_events.jsonl``; a breaker transition also needs ``t_ns``,
    ``upstream``, ``from`` and ``to`` (checked separately: ``from`` is a keyword)."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    event: str


class CaseInfoShape(TypedDict):
    """``case.json``."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    status: NotRequired[str]
    error: NotRequired[str | None]
    server: NotRequired[dict[str, Any] | None]
    failed_requests: NotRequired[int | None]
    requests: NotRequired[int | None]
    # Display only: read leniently (analysis.summaries.client_rows), never a reason to drop
    # the case's status and server facts.
    client: NotRequired[Any]


class RunInfoShape(TypedDict):
    """``run.json``."""

    __pydantic_config__ = _CONFIG  # type: ignore[misc]
    status: NotRequired[str | None]
    command: NotRequired[list[str] | None]
    started_at: NotRequired[str | None]
    wall_s: NotRequired[float | None]
    model_variant: NotRequired[dict[str, Any] | None]
    cpu: NotRequired[dict[str, Any] | None]


_TRANSITION_KEYS = {"t_ns": int, "upstream": str, "from": str, "to": str}

#: Row kind → its validator.
SHAPES: dict[str, TypeAdapter[Any]] = {
    "record": TypeAdapter(RecordShape),
    "phase": TypeAdapter(PhaseShape),
    "sample": TypeAdapter(SampleShape),
    "scrape": TypeAdapter(ScrapeShape),
    "clock offset": TypeAdapter(ClockOffsetShape),
    "fault": TypeAdapter(FaultShape),
    "gateway event": TypeAdapter(EventShape),
    "case": TypeAdapter(CaseInfoShape),
    "run": TypeAdapter(RunInfoShape),
}


def _extra_problem(kind: str, row: dict[str, Any]) -> str | None:
    """What the TypedDicts cannot say: stamps named ``*_ns`` of a fault, a transition's keys."""
    if kind == "fault":
        bad = [k for k, v in row.items() if k.endswith("_ns") and type(v) is not int]
        return f"{bad[0]}: not an integer" if bad else None
    if kind == "gateway event" and row.get("event") == "breaker_transition":
        for key, typ in _TRANSITION_KEYS.items():
            if type(row.get(key)) is not typ:
                return f"{key}: missing or not {'an integer' if typ is int else 'a string'}"
    return None


def shape_problem(kind: str, row: Any) -> str | None:
    """Why ``row`` is not a well-typed ``kind`` (a key of :data:`SHAPES`), or ``None``.

    The reason names the first offending field, e.g. ``t_ns: Input should be a valid integer``.
    """
    if not isinstance(row, dict):
        return f"not a JSON object ({type(row).__name__})"
    try:
        SHAPES[kind].validate_python(row)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "row"
        return f"{where}: {err['msg']}"
    return _extra_problem(kind, row)
