"""A synthetic prefix-eviction run directory, written the way loadgen writes a real one.

Owns :func:`build_run`, which writes ``run.json``, ``plan.json`` (from the real
``PrefixEviction.plan`` with a small fake capacity), and per case ``case.json``,
``requests.jsonl``, ``phases.jsonl``, ``metrics/samples.jsonl`` and ``metrics/scrapes.jsonl``,
with every number chosen so that tests can compute the report by hand:

- capacity 128 tokens, 2 anchors of 64 tokens + 8-token suffixes (72-token prompts), 6 requests
  per anchor phase, 5 pollution requests (max(4, ceil(2.5 × 128 / 72)) = 5), 4 output tokens;
  the control case is whatever the scenario's own sizing makes of that (``CONTROL_CASE``).
- Phase k starts at ``BASE_NS + k × 2 s``; request j is sent at start + j × 150 ms; its first
  token comes 20 ms later when it hit the cache (64 cached tokens), 80 ms when it missed (0);
  then one token every 10 ms (4 chunks of 1 token); it ends 1 ms after its last chunk.
- Hits: cold — the 2 probes miss, 4 hit; warm, rewarm — all hit; pollution — none;
  revisit — probes miss in the tested case, all hit in the control.
- Counters (``prefix_cache_queries`` = Σ prompt tokens, ``prefix_cache_hits`` = Σ cached tokens,
  ``generation_tokens``, ``prompt_tokens``, ``request_success``) step up at each phase's last
  request end; scrapes every 250 ms. Gauges: 4 running, 2 waiting and KV usage 0.5 (test) /
  0.1 (control) while a phase's requests run, else 0.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat import (
    FORMAT_VERSION,
    CaseInfo,
    ClockOffsetRow,
    PhaseRow,
    RunInfo,
    ScrapeTick,
)
from loadgen.runformat.layout import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    PHASES_FILE,
    PLAN_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    append_jsonl,
    case_dir,
    worker_requests_file,
    write_json,
)
from metrics.samples import Sample
from metrics.store import SAMPLES_FILE, SCRAPES_FILE, sample_to_json
from scenarios.plan import Plan
from scenarios.prefix_eviction import PrefixEviction, PrefixEvictionParams
from scenarios.workloads import materialize
from server.capacity import KVCapacity

MS = 1_000_000
S = 1_000_000_000
BASE_NS = 1_000 * S
PHASE_SPACING_NS = 2 * S
SEND_SPACING_NS = 150 * MS
HIT_TTFT_NS = 20 * MS
MISS_TTFT_NS = 80 * MS
ITL_NS = 10 * MS
SCRAPE_NS = 250 * MS

CAPACITY = KVCapacity(tokens=128, block_size=16, num_blocks=8, memory_bytes=2**30, source="metrics")
PARAMS = PrefixEvictionParams(
    anchors=2,
    prefix_tokens=64,
    suffix_tokens=8,
    requests=6,
    pollution_requests=4,
    output_tokens=4,
    settle_s=0.5,
)
M = (("model_name", "m"),)


@dataclass
class Options:
    """Deviations from the clean run.

    Attributes:
        failed_request: the tested case's last pollution request failed (no token arrived).
        case_json_failed: ``failed_requests`` written to the tested case's ``case.json``
            instead of the true count.
        nan_sample: a NaN ``kv_cache_usage_perc`` sample in the tested case's first scrape.
        workers: write the records as that many load-generator workers would (request j of
            a phase in ``requests.worker-{j mod workers}.jsonl``) instead of
            ``requests.jsonl``; the same requests at the same (true) times.
        worker_clock_ahead_ns: worker k's clock runs k × this ahead of the coordinator's: its
            stamps are written shifted by it, and ``clock_offsets.jsonl`` says so.
    """

    failed_request: bool = False
    case_json_failed: int | None = None
    nan_sample: bool = False
    workers: int = 0
    worker_clock_ahead_ns: int = 0


#: How ``loadgen.execute`` records the sending thread's placement in ``case.json``.
CLIENT_PLACEMENT = {
    "policy": "SCHED_FIFO 1",
    "cpus": [1],
    "reason": "real-time on core(s) 1; the server computes on core(s) 0",
    "problem": None,
}


def build_plan() -> Plan:
    return PrefixEviction().plan(PARAMS, CAPACITY)


TEST_CASE, CONTROL_CASE = (c.name for c in build_plan().cases)


def _cached(case: str, phase: str, index: int, anchors: int) -> int:
    probe = index < anchors
    if phase == "pollution":
        return 0
    if phase == "cold" or (phase == "revisit" and case == TEST_CASE):
        return 0 if probe else PARAMS.prefix_tokens
    return PARAMS.prefix_tokens


def _record(case: str, phase: str, j: int, p: Any, start: int, broken: bool) -> RequestRecord:
    """Request ``j`` (planned as ``p``) of ``phase``, which started at ``start`` (ns): a
    failure without a token when ``broken``, else its 4 chunks timed by its cache hit."""
    cached = _cached(case, phase, j, PARAMS.anchors)
    sent = start + j * SEND_SPACING_NS
    first = sent + (HIT_TTFT_NS if cached else MISS_TTFT_NS)
    rec = RequestRecord(
        request_id=p.request_id,
        case=case,
        phase=phase,
        index=j,
        group=p.group,
        prompt_tokens_sent=len(p.prompt_token_ids),
        max_tokens=p.max_tokens,
        scheduled_ns=start,
        sent_ns=sent,
        http_status=200,
    )
    if broken:
        rec.status = "error"
        rec.error = "ClientPayloadError: Response payload is not completed"
        rec.end_ns = sent + MISS_TTFT_NS
        return rec
    rec.chunk_ns = [first + i * ITL_NS for i in range(p.max_tokens)]
    rec.chunk_tokens = [1] * p.max_tokens
    rec.end_ns = rec.chunk_ns[-1] + MS
    rec.status = "ok"
    rec.usage_prompt_tokens = len(p.prompt_token_ids)
    rec.usage_completion_tokens = p.max_tokens
    rec.cached_tokens = cached
    rec.finish_reason = "length"
    return rec


def _write_phase(
    cdir: Path, case: str, k: int, phase: Any, plan: Plan, writers: list[RecordWriter],
    options: Options,
) -> tuple[int, int, int, dict[str, float]]:  # fmt: skip
    """Phase ``k``'s records, clock offsets and ``phases.jsonl`` row: its start and last end
    (ns), its failed requests and its counter increments."""
    start = BASE_NS + k * PHASE_SPACING_NS
    planned = materialize(phase.workload, phase.name, plan.seed, plan.tokens)
    totals = {"queries": 0.0, "hits": 0.0, "generated": 0.0, "success": 0.0}
    ends = []
    failed = 0
    for j, p in enumerate(planned):
        broken = (
            options.failed_request
            and case == TEST_CASE
            and phase.name == "pollution"
            and j == len(planned) - 1
        )
        rec = _record(case, phase.name, j, p, start, broken)
        if broken:
            failed += 1
        else:
            totals["generated"] += p.max_tokens
            totals["success"] += 1
        totals["queries"] += len(p.prompt_token_ids)
        totals["hits"] += rec.cached_tokens or 0
        ends.append(rec.end_ns)
        worker = j % len(writers)
        writers[worker].write(_ahead(rec, worker * options.worker_clock_ahead_ns))
    if options.workers and options.worker_clock_ahead_ns:
        for w in range(options.workers):
            append_jsonl(cdir / CLOCK_OFFSETS_FILE, ClockOffsetRow(
                phase=phase.name, worker=w, node=f"node-{w}",
                offset_ns=w * options.worker_clock_ahead_ns,
                rtt_ns=400_000, bound_ns=200_000, samples=10,
            ))  # fmt: skip
    last_end = max(e for e in ends if e is not None)
    append_jsonl(
        cdir / PHASES_FILE,
        PhaseRow(
            phase=phase.name,
            start_ns=start,
            last_end_ns=last_end,
            end_ns=last_end + int(phase.settle_s * S),
            settle_s=phase.settle_s,
            requests=len(planned),
            loop_lag_max_ms=0.25,
            loop_lag_p99_ms=0.125,
            late_sends=0,
        ),
    )
    return start, last_end, failed, totals


def _write_case(run_dir: Path, plan: Plan, case_index: int, options: Options) -> None:
    spec = plan.cases[case_index]
    cdir = case_dir(run_dir, spec.name)
    failed = 0
    increments: list[tuple[int, dict[str, float]]] = []  # (time, counter increments)
    busy: list[tuple[int, int]] = []  # (first send, last end) per phase
    paths = (
        [cdir / worker_requests_file(w) for w in range(options.workers)]
        if options.workers
        else [cdir / REQUESTS_FILE]
    )
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(RecordWriter(path)) for path in paths]
        for k, phase in enumerate(plan.phases):
            start, last_end, phase_failed, totals = _write_phase(
                cdir, spec.name, k, phase, plan, writers, options
            )
            failed += phase_failed
            increments.append((last_end, totals))
            busy.append((start, last_end))
    _write_metrics(cdir, spec.name, increments, busy, options)
    requests = sum(1 for path in paths for _ in path.open())
    write_json(
        cdir / CASE_FILE,
        CaseInfo(
            case=spec.model_dump(mode="json"),
            server={
                "version": "0.32.0",
                "startup_s": 31.5,
                # A control holds what the plan says it must (control_needs_tokens).
                "capacity": {"tokens": 128, "block_size": 16, "num_blocks": 8}
                if spec.role == "test"
                else {"tokens": 1024, "block_size": 16, "num_blocks": 64},
            },
            status="failed" if failed else "ok",
            error=f"{failed} of {requests} requests failed" if failed else None,
            requests=requests,
            failed_requests=failed if options.case_json_failed is None
            else options.case_json_failed,
            client=[CLIENT_PLACEMENT],
        ),
    )  # fmt: skip


def _ahead(rec: RequestRecord, shift_ns: int) -> RequestRecord:
    """``rec`` as a worker whose clock runs ``shift_ns`` ahead stamps it."""
    if not shift_ns:
        return rec
    return msgspec.structs.replace(
        rec,
        scheduled_ns=rec.scheduled_ns + shift_ns,
        sent_ns=None if rec.sent_ns is None else rec.sent_ns + shift_ns,
        end_ns=None if rec.end_ns is None else rec.end_ns + shift_ns,
        chunk_ns=[t + shift_ns for t in rec.chunk_ns],
    )


def _write_metrics(
    cdir: Path,
    case: str,
    increments: list[tuple[int, dict[str, float]]],
    busy: list[tuple[int, int]],
    options: Options,
) -> None:
    kv_busy = 0.5 if case == TEST_CASE else 0.1
    first_scrape = BASE_NS - 2 * SCRAPE_NS
    last_scrape = busy[-1][1] + S
    (cdir / "metrics").mkdir(parents=True, exist_ok=True)
    with (
        open(cdir / SAMPLES_FILE, "w", encoding="utf-8") as samples_fh,
        open(cdir / SCRAPES_FILE, "w", encoding="utf-8") as scrapes_fh,
    ):
        for scrape, t in enumerate(range(first_scrape, last_scrape + 1, SCRAPE_NS)):
            done = [inc for at, inc in increments if at <= t]
            total = {key: sum(d[key] for d in done) for key in ("queries", "hits", "generated")}
            success = sum(d["success"] for d in done)
            running = any(a <= t <= b for a, b in busy)
            samples = [
                Sample(t, "prefix_cache_queries", M, total["queries"]),
                Sample(t, "prefix_cache_hits", M, total["hits"]),
                Sample(t, "prompt_tokens", M, total["queries"]),
                Sample(t, "generation_tokens", M, total["generated"]),
                Sample(t, "num_preemptions", M, 0.0),
                Sample(t, "request_success", (("finished_reason", "length"), *M), success),
                Sample(t, "request_success", (("finished_reason", "abort"), *M), 0.0),
                Sample(t, "num_requests_running", M, 4.0 if running else 0.0),
                Sample(t, "num_requests_waiting", M, 2.0 if running else 0.0),
                Sample(
                    t,
                    "kv_cache_usage_perc",
                    M,
                    float("nan")
                    if options.nan_sample and case == TEST_CASE and scrape == 0
                    else (kv_busy if running else 0.0),
                ),
            ]
            samples_fh.write("".join(sample_to_json(s, scrape) + "\n" for s in samples))
            scrape_entry = ScrapeTick(
                scrape=scrape,
                tick=scrape,
                deadline_ns=t - 2 * MS,
                start_ns=t - 2 * MS,
                late=False,
                end_ns=t,
                outcome="ok",
                bytes=47272,
                samples=len(samples),
                nan_dropped=0,
            )
            scrapes_fh.write(msgspec.json.encode(scrape_entry).decode() + "\n")


def build_run(run_dir: Path, options: Options | None = None) -> Plan:
    """Write the synthetic run (without report and manifest) into ``run_dir``."""
    options = options or Options()
    plan = build_plan()
    write_json(run_dir / PLAN_FILE, plan.model_dump(mode="json"))
    write_json(
        run_dir / RUN_FILE,
        RunInfo(
            format_version=FORMAT_VERSION,
            command=["loadgen", "run", "prefix-eviction", "--cache", "1GiB"],
            started_at="2025-11-30T14:00:00Z",
            status="failed" if options.failed_request else "ok",
            wall_s=123.4,
            clock={"wall_ns": 1_764_511_200_000_000_000, "monotonic_ns": BASE_NS},
        ),
    )
    for i in range(len(plan.cases)):
        _write_case(run_dir, plan, i, options)
    return plan
