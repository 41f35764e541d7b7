"""Arrival patterns: when each request of a phase is sent.

- closed-loop: a fixed number C of requests in flight; the next is sent when one finishes.
  With ``duration_s`` the loop stops sending once that long has passed since the phase start
  (the workload's request count is then an upper bound: whichever limit comes first ends the
  sending, as GuideLLM's ``max_requests``/``max_seconds``). With ``ramp_s`` the C senders
  start one after the other, evenly over that time, instead of all at once.
- all-at-once: every request sent at the phase start (closed-loop with C = all).
- open-loop: requests sent at precomputed offsets from the phase start (rate λ), regardless
  of completions. Inter-arrival gaps are gamma-distributed with shape = ``burstiness``
  (1.0 = Poisson), mean 1/λ, as in vLLM's ``bench serve``; or, with ``pattern="constant"``,
  all equal to 1/λ. An optional ``max_concurrency`` caps requests in flight at the client
  (vLLM bench's ``--max-concurrency``): an arrival that finds the cap reached waits for a
  slot, and the record keeps that wait (``admitted_ns``). With ``duration_s`` the phase sends
  exactly the arrivals of its schedule that fall in [0, duration_s) (:func:`arrivals_within`);
  its rate may be late-bound (``scenarios.late``), resolved by the orchestrator before it runs.
- trace: requests sent on a trace's own timestamps (``offsets_ms``, trace time), compressed
  by ``speedup`` (offset ÷ speedup), on the same absolute schedule as the open loop; a
  session's later turn is instead sent its delay ÷ speedup after the end of the turn it
  follows (closed within a session, open across sessions).

Offsets are a pure, seeded function; the sender sleeps until start + offset (absolute, so
lateness does not accumulate) and the records keep the scheduled time to show lateness. The
offsets of n requests are a prefix of those of any larger n (numpy draws gamma variates one
after the other), so counting arrivals within a duration and sending them agree.
"""

from __future__ import annotations

import bisect
import math
from typing import Annotated, Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from scenarios.late import LateBindingError, Measured, Measurements


class ArrivalPattern(BaseModel):
    """What every arrival pattern answers, so that no caller tells the kinds apart.

    The defaults are those of a pattern without a time limit, a schedule or a late-bound
    figure; each kind overrides what it has.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def time_limit_s(self) -> float | None:
        """Seconds after the phase start at which sending ends (``duration_s``), if any."""
        return None

    @property
    def ends_on_time(self) -> bool:
        """Whether the time limit may end the sending before the workload's count is sent
        (a closed loop with ``duration_s``: the count is only an upper bound)."""
        return False

    @property
    def timed(self) -> bool:
        """Whether requests leave on a schedule of offsets from the phase start (open loop,
        trace) rather than whenever a sender is free (closed loop, all at once)."""
        return False

    @property
    def has_sessions(self) -> bool:
        """Whether some request waits for the end of another (a trace's session turn)."""
        return False

    @property
    def ramps_senders(self) -> bool:
        """Whether its senders start one after the other (a closed loop's ``ramp_s``)."""
        return False

    @property
    def concurrency_cap(self) -> int | None:
        """A fixed limit of requests in flight the pattern itself sets (a closed loop's C, an
        open loop's ``max_concurrency``), else ``None``."""
        return None

    @property
    def steady_concurrency(self) -> int | None:
        """A closed loop's C: requests kept in flight all along; ``None`` for other kinds."""
        return None

    @property
    def late_rate(self) -> Measured | None:
        """The rate, when it is a late-bound figure (``scenarios.late``), else ``None``."""
        return None

    def open_rate(self) -> float | None:
        """An open loop's λ (req/s), ``None`` for other kinds.

        Raises:
            LateBindingError: the rate is still a late-bound figure.
        """
        return None

    def gamma_shape(self) -> float:
        """The shape of its gamma inter-arrival gaps (vLLM bench's "burstiness"): an open
        loop's ``burstiness``; 1.0 (Poisson, vLLM bench's default) for other kinds."""
        return 1.0

    def start_offset_ns(self, sender: int) -> int:
        """When sender ``sender`` sends its first request, ns after the phase start."""
        return 0

    def follows_turn(self, i: int) -> int | None:
        """The request whose END request ``i`` waits for (a session turn), else ``None``."""
        return None

    def delay_ns(self, i: int) -> int:
        """The wait after the end of the turn request ``i`` follows, ns."""
        return 0

    def concurrency_limit(self, n: int) -> int | None:
        """How many of a phase's ``n`` requests may be in flight (``None`` = unlimited: an
        uncapped open loop or a trace)."""
        return self.concurrency_cap

    def slots(self, n: int) -> int | None:
        """Senders that each take the next of ``n`` requests when their own finishes (at
        least 1), ``None`` for a timed pattern."""
        return None

    def in_flight_at_start(self, n: int, window_s: float) -> int:
        """How many of ``n`` requests are in flight within the first ``window_s`` seconds at
        most (its concurrency, a cap, or the timed arrivals due in that window)."""
        limit = self.concurrency_limit(n)
        return n if limit is None else limit

    def resolved(self, measurements: Measurements) -> tuple[Self, dict[str, Any]]:
        """The pattern with its late-bound figures resolved, and what that used (for
        ``phases.jsonl``: ``rate_from``, ``rate_rps``); ``(self, {})`` when nothing is late.

        Raises:
            scenarios.late.LateBindingError: a source phase was not measured.
        """
        return self, {}

    def count_within_limit(self) -> int | None:
        """The request count that follows from the time limit (an open loop's arrivals in
        ``duration_s``), ``None`` when the workload gives the count."""
        return None

    def min_span_s(self, n: int | None) -> float | None:
        """The time the phase's own clock plans for ``n`` requests (s), whatever the server
        does (``scenarios.schedule``): 0 for a pattern that sends everything at once;
        ``None`` while it depends on a late-bound figure; ``inf`` when it overflows a float."""
        return 0.0

    def describe(self) -> str:
        """The pattern in a few words, for reports."""
        raise NotImplementedError


class ClosedLoop(ArrivalPattern):
    """Keep ``concurrency`` requests in flight (for at most ``duration_s`` seconds if given).

    ``ramp_s``: sender k (0-based) sends its first request k × ramp_s / concurrency seconds
    after the phase start. Requests that start together, with fixed lengths, also finish
    together, and a server then runs in lockstep cohorts (one large prefill, then decodes
    only) that an open-loop load never produces; staggered starts avoid that.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(gt=0)
    duration_s: float | None = Field(default=None, gt=0)
    ramp_s: float = Field(default=0.0, ge=0)

    @property
    def time_limit_s(self) -> float | None:
        return self.duration_s

    @property
    def ends_on_time(self) -> bool:
        return self.duration_s is not None

    @property
    def ramps_senders(self) -> bool:
        return self.ramp_s > 0

    @property
    def concurrency_cap(self) -> int:
        return self.concurrency

    @property
    def steady_concurrency(self) -> int:
        return self.concurrency

    def start_offset_ns(self, sender: int) -> int:
        return int(sender * self.ramp_s * 1e9 / self.concurrency)

    def min_span_s(self, n: int | None) -> float:
        """Its duration when it has one (a count reached first ends it sooner), else the
        last sender's first send."""
        if self.duration_s is not None:
            return self.duration_s
        senders = self.concurrency if n is None else min(n, self.concurrency)
        return self.ramp_s * max(senders - 1, 0) / self.concurrency

    def slots(self, n: int) -> int:
        return max(1, min(self.concurrency, n))

    def describe(self) -> str:
        return f"closed loop, C = {self.concurrency}"


class AllAtOnce(ArrivalPattern):
    """Send every request at the phase start."""

    kind: Literal["all_at_once"] = "all_at_once"

    def concurrency_limit(self, n: int) -> int:
        return max(n, 1)

    def slots(self, n: int) -> int:
        return max(1, n)

    def describe(self) -> str:
        return "all at once"


class OpenLoop(ArrivalPattern):
    """Send at ``rate_rps`` requests/s on average.

    Attributes:
        rate_rps: the arrival rate λ (req/s), or a :class:`~scenarios.late.Measured` figure
            the orchestrator resolves before the phase (see :meth:`rate`).
        burstiness: shape of the gamma inter-arrival distribution (1.0 = Poisson; lower is
            burstier); ignored by the constant pattern.
        pattern: ``gamma`` (random gaps) or ``constant`` (every gap exactly 1/λ).
        seed: seed of the gaps.
        max_concurrency: at most this many requests in flight (``None``: no client cap).
        duration_s: send the arrivals falling in [0, duration_s) (the request count follows
            from the schedule); ``None``: send the workload's ``requests``.
        ramp_s: the rate rises linearly from 0 to λ over the first ``ramp_s`` seconds, then
            stays at λ (:func:`ramped`); 0: λ from the start.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    kind: Literal["open_loop"] = "open_loop"
    rate_rps: Annotated[float, Field(gt=0)] | Measured
    burstiness: float = Field(default=1.0, gt=0)
    pattern: Literal["gamma", "constant"] = "gamma"
    seed: int = 0
    max_concurrency: int | None = Field(default=None, gt=0)
    duration_s: float | None = Field(default=None, gt=0)
    ramp_s: float = Field(default=0.0, ge=0)

    def rate(self) -> float:
        """λ in req/s.

        Raises:
            LateBindingError: the rate is still a late-bound figure (not resolved).
        """
        if isinstance(self.rate_rps, Measured):
            raise LateBindingError(
                f"the open-loop rate ({self.rate_rps.describe()}) is resolved at run time"
            )
        return self.rate_rps

    @property
    def time_limit_s(self) -> float | None:
        return self.duration_s

    @property
    def timed(self) -> bool:
        return True

    @property
    def concurrency_cap(self) -> int | None:
        return self.max_concurrency

    @property
    def late_rate(self) -> Measured | None:
        return self.rate_rps if isinstance(self.rate_rps, Measured) else None

    def open_rate(self) -> float:
        return self.rate()

    def gamma_shape(self) -> float:
        return self.burstiness

    def in_flight_at_start(self, n: int, window_s: float) -> int:
        if self.max_concurrency is not None:
            return self.max_concurrency
        return math.ceil(self.rate() * window_s)

    def resolved(self, measurements: Measurements) -> tuple[Self, dict[str, Any]]:
        record: dict[str, Any] = {}
        arrival = self
        if isinstance(self.rate_rps, Measured):
            record["rate_from"] = self.rate_rps.inputs(measurements)
            arrival = self.model_copy(update={"rate_rps": record["rate_from"]["value"]})
        record["rate_rps"] = arrival.rate()
        return arrival, record

    def count_within_limit(self) -> int | None:
        return None if self.duration_s is None else arrivals_within(self, self.duration_s)

    def min_span_s(self, n: int | None) -> float | None:
        """Its duration, else when the last of ``n`` requests is due
        (:func:`open_loop_span_s`); ``None`` while the rate is a late-bound figure."""
        if self.duration_s is not None:
            return self.duration_s
        if isinstance(self.rate_rps, Measured) or n is None:
            return None
        return open_loop_span_s(self, n)

    def describe(self) -> str:
        cap = f", cap {self.max_concurrency}" if self.max_concurrency else ""
        ramp = f", ramp {self.ramp_s:g} s" if self.ramp_s else ""
        how = "constant" if self.pattern == "constant" else f"gamma {self.burstiness:g}"
        return f"open loop, {self.rate():g} req/s ({how}{cap}{ramp})"


class TraceArrival(ArrivalPattern):
    """Send on a trace's own clock, ``speedup`` times faster (0.5 = half as fast).

    Attributes:
        speedup: time compression: request i of a timed start leaves at offset_ms[i] ÷
            speedup after the phase start.
        offsets_ms: per request, its trace time (ms) from the slice's first request, or
            ``None`` for a session turn sent after the turn it follows.
        follows: per request, the index (in this phase) of the session turn whose END it
            waits for, or ``None`` for a timed start.
        delays_ms: per request, the trace's delay (ms) between the end of the turn it follows
            and its send; 0 for timed starts.
        compress_delays: divide session delays by ``speedup`` too (default: the whole trace
            clock, think times included, runs ``speedup`` times faster).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    kind: Literal["trace"] = "trace"
    speedup: float = Field(gt=0)
    offsets_ms: tuple[float | None, ...]
    follows: tuple[int | None, ...]
    delays_ms: tuple[float, ...]
    compress_delays: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> TraceArrival:
        n = len(self.offsets_ms)
        if len(self.follows) != n or len(self.delays_ms) != n:
            raise ValueError("offsets_ms, follows and delays_ms must have one entry a request")
        for i, (offset, follows) in enumerate(zip(self.offsets_ms, self.follows, strict=True)):
            if (offset is None) == (follows is None):
                raise ValueError(f"request {i}: give either a trace offset or the turn it follows")
            if follows is not None and not 0 <= follows < i:
                raise ValueError(f"request {i} must follow an earlier request, not {follows}")
            if offset is not None and offset < 0:
                raise ValueError(f"request {i}: negative trace offset {offset}")
        return self

    @property
    def has_sessions(self) -> bool:
        return any(f is not None for f in self.follows)

    @property
    def timed(self) -> bool:
        return True

    def follows_turn(self, i: int) -> int | None:
        return self.follows[i]

    def min_span_s(self, n: int | None = None) -> float:
        """The latest due time of a request, a session turn's counted from the due time of
        the turn it follows (its own service time left out)."""
        scale = self.speedup if self.compress_delays else 1.0
        due: list[float] = []
        for offset, follows, delay in zip(self.offsets_ms, self.follows, self.delays_ms,
                                          strict=True):  # fmt: skip
            if offset is not None:
                due.append(offset / 1e3 / self.speedup)
            else:
                assert follows is not None  # validated: a turn follows an earlier request
                due.append(due[follows] + delay / 1e3 / scale)
        return max(due, default=0.0)

    def in_flight_at_start(self, n: int, window_s: float) -> int:
        return sum(
            1 for i in range(n) if self.follows[i] is None and self.offset_ns(i) < window_s * 1e9
        )

    def describe(self) -> str:
        return f"trace at {self.speedup:g}× its clock"

    def offset_ns(self, i: int) -> int:
        """When timed request ``i`` is due, ns after the phase start (trace ms ÷ speedup).

        Raises:
            ValueError: request ``i`` is a session turn (it has no fixed time).
        """
        offset = self.offsets_ms[i]
        if offset is None:
            raise ValueError(f"request {i} follows request {self.follows[i]}: no fixed time")
        return round(offset * 1e6 / self.speedup)

    def delay_ns(self, i: int) -> int:
        """The wait after the end of the turn request ``i`` follows, ns (÷ speedup when
        ``compress_delays``)."""
        scale = self.speedup if self.compress_delays else 1.0
        return round(self.delays_ms[i] * 1e6 / scale)


Arrival = Annotated[ClosedLoop | AllAtOnce | OpenLoop | TraceArrival, Field(discriminator="kind")]


#: Latest send offset kept (ns): the largest int64, the type the run format keeps times in
#: (292 years). A schedule reaching it is refused before a run (``scenarios.schedule``);
#: clipping only keeps the arithmetic of one that is being checked from overflowing.
MAX_OFFSET_NS = 2**63 - 1


def _ns(value_ns: float) -> int:
    return int(value_ns) if value_ns < MAX_OFFSET_NS else MAX_OFFSET_NS


def _offsets_s(arrival: OpenLoop, n: int) -> np.ndarray:
    """Send offsets in seconds (floats; ``inf`` where they overflow) for ``n`` ≥ 1 requests."""
    rate = arrival.rate()
    with np.errstate(over="ignore", divide="ignore"):  # a tiny rate: inf, refused later
        if arrival.pattern == "constant":
            steady = np.arange(n) / rate
        else:
            rng = np.random.default_rng(arrival.seed)
            shape = arrival.burstiness
            gaps_s = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
            steady = np.concatenate([[0.0], np.cumsum(gaps_s)])
        return ramped(steady, arrival.ramp_s)


def open_loop_offsets_ns(arrival: OpenLoop, n: int) -> list[int]:
    """Send offsets (ns from phase start) for ``n`` requests; the first is at 0.

    Gamma: gaps ~ Gamma(shape=burstiness, scale=1/(λ·burstiness)), so the mean gap is 1/λ s.
    Constant: gap i = exactly 1/λ s. An offset beyond :data:`MAX_OFFSET_NS` is clipped to it.

    Raises:
        LateBindingError: the rate is not resolved yet.
    """
    if n == 0:
        return []
    rate = arrival.rate()
    if arrival.pattern == "constant" and arrival.ramp_s == 0:
        return [_ns(i * 1e9 / rate) for i in range(n)]
    return [_ns(x * 1e9) for x in _offsets_s(arrival, n)]


def open_loop_span_s(arrival: OpenLoop, n: int) -> float:
    """When the last of ``n`` requests is due, seconds after the phase start (0 for n ≤ 1;
    ``inf`` when it overflows a float).

    Raises:
        LateBindingError: the rate is not resolved yet.
    """
    return float(_offsets_s(arrival, n)[-1]) if n > 1 else 0.0


def ramped(steady_s: np.ndarray, ramp_s: float) -> np.ndarray:
    """Offsets of a schedule at a constant rate λ (s) warped onto a linear ramp of ``ramp_s``.

    With λ(t) = λ·t/T for t < T (T = ``ramp_s``) and λ after, the expected arrivals by t are
    Λ(t) = λ·t²/(2T) for t < T and λ·(t − T/2) after. An arrival at u s of the constant
    schedule (λ·u arrivals before it) moves to Λ⁻¹(λ·u): t = √(2·T·u) for u < T/2, else
    u + T/2 (a time change of the same point process, so gaps keep their distribution shape).
    """
    if ramp_s <= 0:
        return steady_s
    half = ramp_s / 2
    return np.where(steady_s < half, np.sqrt(2 * ramp_s * steady_s), steady_s + half)


#: Ceiling of the requests of one phase (``scenarios.common.MAX_REQUESTS``): at the CPU
#: vLLM's pace (a few requests a second) 100,000 already take hours.
MAX_PHASE_REQUESTS = 100_000


def arrivals_within(arrival: OpenLoop, duration_s: float) -> int:
    """How many offsets of ``arrival``'s schedule fall in [0, ``duration_s``) (at least 1:
    the first arrival is at 0).

    Raises:
        LateBindingError: the rate is not resolved yet, or rate × duration is more than
            :data:`MAX_PHASE_REQUESTS` (a late-bound rate, a fraction of a measured
            throughput, is only known at run time; the case then fails before the phase).
    """
    limit_ns = int(duration_s * 1e9)
    expected = arrival.rate() * duration_s
    if expected > MAX_PHASE_REQUESTS:
        raise LateBindingError(
            f"{arrival.rate():g} req/s over {duration_s:g} s is {expected:,.0f} requests, more "
            f"than {MAX_PHASE_REQUESTS:,} in a phase"
        )
    n = max(2, math.ceil(expected + 6 * math.sqrt(expected) + 10))
    while True:
        offsets = open_loop_offsets_ns(arrival, n)
        if offsets[-1] >= limit_ns:
            return max(1, bisect.bisect_left(offsets, limit_ns))
        n *= 2


def concurrency_limit(arrival: ArrivalPattern, n: int) -> int | None:
    """How many of ``n`` requests may be in flight (:meth:`ArrivalPattern.concurrency_limit`)."""
    return arrival.concurrency_limit(n)
