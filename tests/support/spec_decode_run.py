"""A synthetic spec-decode run directory, written the way loadgen writes a real one.

Owns :func:`build_run`: the real ``SpecDecode.plan`` (cases baseline, ngram, draft-random,
draft-echo; one phase ``c1``; 2 requests of 16 prompt + 9 output tokens, so 8 decode tokens
each; k = 3), and per case the records, phase boundaries, counter samples and scrapes below,
every number chosen so the report can be computed by hand:

- request 0 is sent at the phase start, request 1 when request 0 ends (concurrency 1); the
  first token comes 50 ms after the send; then the decode chunks below; the end is 1 ms later.
- baseline: 8 one-token chunks every 16 ms (TPOT 16 ms); request 1 instead has a merged read:
  tokens 1, 1, 1, 2, 1, 1, 1 with a 32 ms gap before the 2 (TPOT still 128 / 8 = 16 ms), and a
  ``/metrics`` scrape starts inside that gap.
- ngram: chunks of 1, 4, 3 tokens every 24 ms (TPOT 72 / 8 = 9 ms); the first step had no
  proposal, then 3 proposals all accepted, then 3 with 2 accepted: per request drafts 2, draft
  tokens 6, accepted 5, per position 2, 2, 1.
- draft-random: 8 one-token chunks every 20 ms (TPOT 20 ms); every step proposed 3, none
  accepted: per request drafts 8, draft tokens 24, accepted 0.
- draft-echo: chunks of 1, 4, 3 tokens every 30 ms (TPOT 90 / 8 = 11.25 ms); every step
  proposed 3: 0, 3 and 2 accepted: per request drafts 3, draft tokens 9, accepted 5, per
  position 2, 2, 1.
- Counters (one engine) are 0 at a scrape 100 ms before the phase and at their final values
  at a scrape 100 ms after the last request ended (generation tokens 2 × 9 = 18, request
  success 2); the baseline has one more scrape, inside its merged gap, before anything counted.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat import FORMAT_VERSION, CaseInfo, PhaseRow, RunInfo, ScrapeTick
from loadgen.runformat.layout import (
    CASE_FILE,
    PHASES_FILE,
    PLAN_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    append_jsonl,
    case_dir,
    write_json,
)
from metrics.samples import Sample
from metrics.store import SAMPLES_FILE, SCRAPES_FILE, sample_to_json
from scenarios.plan import Plan
from scenarios.spec_decode import SpecDecode, SpecDecodeParams
from scenarios.workloads import materialize
from server.capacity import KVCapacity

MS = 1_000_000
S = 1_000_000_000
BASE_NS = 1_000 * S
TTFT_NS = 50 * MS
CAPACITY = KVCapacity(18_688, 128, 146, 2**30, "metrics")
PARAMS = SpecDecodeParams(
    cases="baseline,ngram,draft-random,draft-echo",
    concurrency="1",
    requests=2,
    prompt_tokens=16,
    output_tokens=9,
    k=3,
    settle_s=0.5,
)
M = (("engine", "0"), ("model_name", "m"))

#: case → per request: (decode chunk tokens, gap before each chunk in ms)
CHUNKS: dict[str, list[tuple[list[int], list[int]]]] = {
    "baseline": [([1] * 8, [16] * 8), ([1, 1, 1, 2, 1, 1, 1], [16, 16, 16, 32, 16, 16, 16])],
    "ngram": [([1, 4, 3], [24, 24, 24])] * 2,
    "draft-random": [([1] * 8, [20] * 8)] * 2,
    "draft-echo": [([1, 4, 3], [30, 30, 30])] * 2,
}
#: case → per-phase totals of (drafts, draft tokens, accepted, accepted per position)
SPEC: dict[str, tuple[float, float, float, tuple[float, float, float]]] = {
    "ngram": (4, 12, 10, (4, 4, 2)),
    "draft-random": (16, 48, 0, (0, 0, 0)),
    "draft-echo": (6, 18, 10, (4, 4, 2)),
}
CAPACITY_TOKENS = {"baseline": 18_688, "ngram": 18_688, "draft-random": 17_408,
                   "draft-echo": 17_408}  # fmt: skip


def build_plan() -> Plan:
    return SpecDecode().plan(PARAMS, CAPACITY)


def _records(cdir: Path, plan: Plan, case: str) -> tuple[int, int, int | None]:
    """Write the case's records; (phase start, last end, start of the merged gap or None)."""
    phase = plan.phases_of(plan.cases[0])[0]
    start = BASE_NS
    sent = start
    merged_gap_start = None
    with RecordWriter(cdir / REQUESTS_FILE) as writer:
        for j, planned in enumerate(
            materialize(phase.workload, phase.name, plan.seed, plan.tokens)
        ):
            tokens, gaps = CHUNKS[case][j]
            stamps = [sent + TTFT_NS]
            for gap in gaps:
                if gap == 32:
                    merged_gap_start = stamps[-1]
                stamps.append(stamps[-1] + gap * MS)
            rec = RequestRecord(
                request_id=planned.request_id, case=case, phase=phase.name, index=j,
                group=planned.group, prompt_tokens_sent=16, max_tokens=9, scheduled_ns=start,
                admitted_ns=sent, sent_ns=sent, chunk_ns=stamps, chunk_tokens=[1, *tokens],
                token_timing="usage", end_ns=stamps[-1] + MS, http_status=200, status="ok",
                usage_prompt_tokens=16, usage_completion_tokens=9, finish_reason="length",
            )  # fmt: skip
            writer.write(rec)
            sent = rec.end_ns or sent
    return start, sent, merged_gap_start


def _metrics(cdir: Path, case: str, start: int, last_end: int, gap: int | None) -> None:
    before = [start - 100 * MS] + ([gap + 5 * MS] if gap is not None else [])
    after = last_end + 100 * MS
    (cdir / "metrics").mkdir(parents=True, exist_ok=True)
    with (
        open(cdir / SAMPLES_FILE, "w", encoding="utf-8") as samples,
        open(cdir / SCRAPES_FILE, "w", encoding="utf-8") as scrapes,
    ):
        for n, t in enumerate([*before, after]):
            final = t == after
            values = [
                Sample(t, "generation_tokens", M, 18.0 if final else 0.0),
                Sample(t, "request_success", (*M, ("finished_reason", "length")), 2.0 * final),
                Sample(t, "num_preemptions", M, 0.0),
                Sample(t, "num_requests_running", M, 0.0),
                Sample(t, "num_requests_waiting", M, 0.0),
            ]
            if case in SPEC:
                drafts, draft_tokens, accepted, per_pos = SPEC[case]
                values += [
                    Sample(t, "spec_decode_num_drafts", M, drafts * final),
                    Sample(t, "spec_decode_num_draft_tokens", M, draft_tokens * final),
                    Sample(t, "spec_decode_num_accepted_tokens", M, accepted * final),
                ] + [
                    Sample(t, "spec_decode_num_accepted_tokens_per_pos",
                           (*M, ("position", str(i))), a * final)
                    for i, a in enumerate(per_pos)
                ]  # fmt: skip
            samples.write("".join(sample_to_json(s, n) + "\n" for s in values))
            tick = ScrapeTick(scrape=n, tick=n, deadline_ns=t - 2 * MS, start_ns=t - 2 * MS,
                              end_ns=t, late=False, outcome="ok", bytes=50_000,
                              samples=len(values), nan_dropped=0)  # fmt: skip
            scrapes.write(msgspec.json.encode(tick).decode() + "\n")


def build_run(run_dir: Path) -> Plan:
    """Write the synthetic run (without report and manifest) into ``run_dir``."""
    plan = build_plan()
    write_json(run_dir / PLAN_FILE, plan.model_dump(mode="json"))
    write_json(
        run_dir / RUN_FILE,
        RunInfo(format_version=FORMAT_VERSION, command=["loadgen", "run", "spec-decode"],
                status="ok", wall_s=100.0),
    )  # fmt: skip
    for spec in plan.cases:
        cdir = case_dir(run_dir, spec.name)
        start, last_end, gap = _records(cdir, plan, spec.name)
        _metrics(cdir, spec.name, start, last_end, gap)
        append_jsonl(
            cdir / PHASES_FILE,
            PhaseRow(phase="c1", start_ns=start, last_end_ns=last_end,
                     end_ns=last_end + S // 2, settle_s=0.5, requests=2,
                     loop_lag_max_ms=0.2, loop_lag_p99_ms=0.1, late_sends=0,
                     post_scrape_start_ns=last_end + 98 * MS),
        )  # fmt: skip
        write_json(
            cdir / CASE_FILE,
            CaseInfo(case=spec.model_dump(mode="json"), status="ok", requests=2,
                     failed_requests=0,
                     server={"version": "0.32.0", "startup_s": 25.0,
                             "capacity": {"tokens": CAPACITY_TOKENS[spec.name],
                                          "block_size": 128,
                                          "num_blocks": CAPACITY_TOKENS[spec.name] // 128}}),
        )  # fmt: skip
    return plan
