"""Whether a run's own client timings can be trusted: the load generator's loop lag and its
stamp coalescing (pure: phase rows and records in, warning lines out).

Every token stamp is taken when the sending loop runs the read that brought the token
(``loadgen.token_timing``), so the client's own delays end up in TTFT, ITL and E2EL. Two
figures the run already writes say how large they were:

- **Loop lag** (``phases.jsonl``: ``loop_lag_p99_ms``, with workers the worst worker's): how
  late the loop woke. A chunk that arrives while the loop is busy waits that long to be
  stamped. Threshold :data:`LOOP_LAG_P99_MS` = 1 ms: the stamp-error budget the testbed holds
  itself to is p99 ≤ 2 ms (TTFT and ITL at 256 and 1,024 streams, docs/benchmarks.md); a loop whose
  own lag p99 is above 1 ms has spent more than half of it before the wire, the parser and
  the scheduler's noise are counted.
- **Stamp coalescing** (the records' ``chunk_tokens``): the share of token-carrying stamps
  that carried more than one token. vLLM writes one event per engine step per stream, one
  token each unless it decodes speculatively; a stamp of k > 1 tokens is then one read that
  found k events waiting, and its first k − 1 tokens were stamped late by at least one
  inter-token gap (several ms on any real engine, above the 2 ms budget). Threshold
  :data:`COALESCED_SHARE` = 1 %: above it, more than 1 in 100 stamps is such a late one, so
  the p99 of ITL (and the tail of TPOT) is the client's lateness, not the server's. The rule
  is skipped when the server decodes speculatively (its ``spec_decode_*`` metric families
  were scraped: several tokens per event are then the server's own) and for requests whose
  tokens all came in one chunk (``final_only``, reported on its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loadgen.placement import NO_FREE_CORE
from loadgen.runformat import PhaseRow, RequestRecord

#: Loop lag p99 above which a phase's client timings are flagged (ms).
LOOP_LAG_P99_MS = 1.0
#: Share of token stamps carrying more than one token above which they are flagged.
COALESCED_SHARE = 0.01


def multi_token_events(sample_names: Iterable[str]) -> bool:
    """Whether the server may send several tokens per event: it exposes speculative-decoding
    metrics (a sample name starting with ``spec_decode_``)."""
    return any(name.startswith("spec_decode_") for name in sample_names)


def phase_loop_lag_p99_ms(row: PhaseRow) -> float | None:
    """The phase's loop-lag p99 (ms): its own, or the worst worker's; ``None`` if cut."""
    lags = [row.loop_lag_p99_ms] if row.loop_lag_p99_ms is not None else []
    lags += [w.loop_lag_p99_ms for w in row.workers or []]
    return max(lags) if lags else None


def coalesced_stamps(records: Iterable[RequestRecord]) -> dict[str, tuple[int, int]]:
    """Per phase: (token-carrying stamps, those that carried more than one token), over the
    records with tokens counted per chunk (``usage`` or ``text``)."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        if r.token_timing not in ("usage", "text"):
            continue
        stamps, coalesced = out.get(r.phase, (0, 0))
        out[r.phase] = (
            stamps + len(r.chunk_tokens),
            coalesced + sum(1 for k in r.chunk_tokens if k > 1),
        )
    return out


def warnings(
    phases: Sequence[PhaseRow], records: Iterable[RequestRecord], multi_token: bool = False
) -> list[str]:
    """One line per phase and cause whose client timings are not to be trusted (empty when
    none): loop lag p99 above :data:`LOOP_LAG_P99_MS`, or (unless ``multi_token``: the
    server sends several tokens per event) more than :data:`COALESCED_SHARE` of the
    token stamps carrying more than one token."""
    out = []
    coalesced = {} if multi_token else coalesced_stamps(records)
    for row in phases:
        lag = phase_loop_lag_p99_ms(row)
        if lag is not None and lag > LOOP_LAG_P99_MS:
            out.append(
                f"phase {row.phase}: client timings not to be trusted: the load generator's "
                f"event loop lagged p99 {lag:.2f} ms (above {LOOP_LAG_P99_MS:g} ms); every token "
                "stamp waits for the loop, so TTFT and ITL carry up to that much of the "
                "client's own delay (fewer streams per process, or --workers)"
            )
        stamps, multi = coalesced.get(row.phase, (0, 0))
        if stamps and multi / stamps > COALESCED_SHARE:
            out.append(
                f"phase {row.phase}: client timings not to be trusted: {multi / stamps:.1%} of "
                f"token stamps ({multi} of {stamps}) carried more than one token (above "
                f"{COALESCED_SHARE:.0%}) from a server that sends one per event: the client, "
                "or a proxy between, fell behind the stream and stamped those tokens late by "
                "up to an inter-token gap, so the ITL tail is its lateness"
            )
    return out


def no_core_for_the_client(client: Sequence[dict[str, object] | None]) -> str | None:
    """Why the load generator had no core of its own, from a case's recorded placements
    (``CaseSummary.client``, ``loadgen.placement.AppliedPlacement`` as dicts), else ``None``.

    It had none when a sending thread ran at normal priority because the case's servers
    compute on every core it may use (:data:`loadgen.placement.NO_FREE_CORE`: a fleet of as
    many replicas as the machine has cores, each computing on its own). Its timers then wait
    their turn behind the engines' busy cores, so its sends go out late however it is written:
    a limit of the machine, not a fault of the client."""
    for placement in client:
        if placement is None or str(placement.get("policy", "")).startswith("SCHED_FIFO"):
            continue
        reason = str(placement.get("reason") or "")
        if NO_FREE_CORE in reason:
            return reason
    return None
