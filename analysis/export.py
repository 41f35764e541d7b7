"""Exporting a run's per-request records (CSV, Parquet) and its phases as vLLM bench results.

``request_table`` flattens every record of every case into one pandas frame (one row per
request, the derived TTFT/TPOT/E2EL in ms, wall-clock send time from the run's anchor);
``vllm_bench_result`` writes one phase as the JSON ``vllm bench serve --save-result`` writes
(vLLM 0.32 ``benchmarks/serve.py``: ``calculate_metrics`` and the result dict of
``main``; checked field by field against a file it wrote on 2026-12-02: the same keys),
computed from the records alone, by vLLM's own rules where they differ from ours:

- ``duration`` = first request sent → last request finished (s); ``request_throughput`` =
  completed ÷ duration; ``output_throughput`` = output tokens ÷ duration;
  ``total_token_throughput`` = (input + output tokens) ÷ duration (successful requests;
  input tokens = the server's usage count, else the planned length);
- TTFT, E2EL per successful request; TPOT = (E2EL − TTFT) ÷ (output − 1) for outputs of 2+
  tokens; ITL = every gap between token-carrying chunks split evenly over the later chunk's
  tokens (ours; vLLM keeps one value per chunk, the same when each chunk carries one token);
  mean, median, population std and the asked percentiles (linear interpolation) in ms;
- ``request_goodput`` = successful requests meeting every SLO of the run ÷ duration
  (``analysis.goodput.judge``), ``None`` without SLOs (vLLM writes ``None`` too);
- ``max_output_tokens_per_s`` and ``max_concurrent_requests``: vLLM's one-second buckets
  from the first send of a successful request: tokens per bucket (each chunk's tokens in the
  bucket of its arrival) and requests active in each bucket.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.goodput import SLOLimits, judge
from analysis.integrity import load_intact_run
from analysis.latency import itl_per_token_ms, request_frame
from analysis.load import RunData
from loadgen.runformat import ReadRecord
from loadgen.runformat.atomic import staged_writes, write_bytes, write_text, write_with
from scenarios.plan import PhaseSpec
from server.net.json_text import dumps, finite_or_none
from server.net.jsonl import writing

#: The request columns written first, in this order (the rest follow as the records have them).
LEADING_COLUMNS = ("case", "phase", "request_id", "index", "status", "error", "sent_wall_s",
                   "prompt_tokens_sent", "usage_prompt_tokens", "max_tokens",
                   "usage_completion_tokens", "output_tokens", "ttft_ms", "tpot_ms",
                   "e2el_ms")  # fmt: skip


def request_table(run: RunData) -> pd.DataFrame:
    """Every record of the run, one row each (``LEADING_COLUMNS`` first); ``sent_wall_s`` is
    the send time as Unix seconds (from ``run.json``'s clock anchor; NaN if absent)."""
    frames = []
    for case in run.cases:
        # ``record`` holds the record object itself (for figures computed per record): its
        # fields are columns already, and no file format can hold the object.
        frame = request_frame(case.records).drop(columns=["record"], errors="ignore")
        if not frame.empty:
            frame["case"] = case.name
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=list(LEADING_COLUMNS))
    out = pd.concat(frames, ignore_index=True)
    anchor = run.run.clock or {}
    if "wall_ns" in anchor and "monotonic_ns" in anchor:
        offset = int(anchor["wall_ns"]) - int(anchor["monotonic_ns"])
        out["sent_wall_s"] = (out["sent_ns"].astype(float) + offset) / 1e9
    else:
        out["sent_wall_s"] = math.nan
    rest = [c for c in out.columns if c not in LEADING_COLUMNS]
    return out[[c for c in LEADING_COLUMNS if c in out.columns] + rest]


def write_requests(run_dir: Path, out: Path, fmt: str) -> Path:
    """Write ``request_table`` of ``run_dir`` as ``fmt`` (``csv``: list columns as JSON text;
    ``parquet``: lists kept) to ``out``; return ``out``.

    The file is written whole or not at all (``loadgen.runformat.atomic.write_with``; a
    device or pipe such as ``/dev/stdout`` in place: Parquet is built in memory first, as
    it seeks in what it writes).

    Raises:
        ValueError: an unknown format.
        ImportError: Parquet without ``pyarrow`` installed.
        IntegrityError: the run is broken (``analysis.integrity``): nothing is exported.
        RunWriteError: the file could not be written.
    """
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"unknown format {fmt!r}")
    table = request_table(load_intact_run(run_dir))
    if fmt == "csv":
        for column in ("chunk_ns", "chunk_tokens"):
            if column in table:
                table[column] = table[column].map(json.dumps)
        write_with(out, lambda tmp: table.to_csv(tmp, index=False))
    else:
        # Parquet seeks back to write its footer: it is made in memory, then written in one
        # go, so a pipe or a terminal (/dev/stdout) takes it as well as a file.
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        write_bytes(out, buffer.getvalue())
    return out


def _stats(name: str, values_ms: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    arr = values_ms if values_ms.size else np.zeros(1)  # vLLM: np.mean(values or 0)
    out = {
        f"mean_{name}_ms": float(np.mean(arr)),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(np.std(arr)),
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def _sent_ns(r: ReadRecord) -> int:
    """The send stamp of a record that was sent (an ``ok`` record always was)."""
    if r.sent_ns is None:
        raise ValueError(f"record {r.request_id} has no send time")
    return r.sent_ns


def _buckets(ok: list[ReadRecord]) -> tuple[float, int]:
    """(max output tokens per 1-s bucket, max requests active in a bucket), as vLLM counts."""
    if not ok:
        return 0.0, 0
    start = min(_sent_ns(r) for r in ok)
    end = max(int(r.chunk_ns[-1]) for r in ok)
    n = math.ceil((end - start) / 1e9) + 1
    tokens = np.zeros(n)
    active = np.zeros(n)
    for r in ok:
        for t, k in zip(r.chunk_ns, r.chunk_tokens, strict=True):
            b = int((int(t) - start) / 1e9)
            if 0 <= b < n:
                tokens[b] += k
        first, last = int((_sent_ns(r) - start) / 1e9), int((r.chunk_ns[-1] - start) / 1e9)
        active[first : last + 1] += 1
    return float(tokens.max()), int(active.max())


def _goodput(run: RunData, frame: pd.DataFrame, duration: float) -> float | None:
    """Requests/s that met the run's SLO (``params.slo``), or ``None`` without one."""
    slo_text = run.plan.params.get("slo")
    if not slo_text or duration <= 0 or frame.empty:
        return None
    from scenarios.values import parse_slo

    limits = parse_slo(str(slo_text))
    slo = SLOLimits(limits.get("ttft"), limits.get("tpot"), limits.get("e2el"))
    return int(judge(frame, slo)["good"].sum()) / duration


def _arrival_fields(planned: PhaseSpec) -> dict[str, Any]:
    """``request_rate`` (req/s, ``"inf"`` when closed-loop), ``burstiness`` and
    ``max_concurrency`` of a planned phase, as vLLM names them."""
    arrival = planned.arrival
    open_rate = arrival.open_rate()
    return {
        "request_rate": "inf" if open_rate is None else open_rate,
        "burstiness": arrival.gamma_shape(),
        "max_concurrency": arrival.concurrency_cap,
    }


def _date(started: object) -> str | None:
    """vLLM's ``date`` (``%Y%m%d-%H%M%S``) from the run's ``started_at`` (ISO, UTC)."""
    if not isinstance(started, str):
        return None
    return time.strftime("%Y%m%d-%H%M%S", time.strptime(started, "%Y-%m-%dT%H:%M:%SZ"))


def _per_request_lists(records: Sequence[ReadRecord]) -> dict[str, list[float]]:
    """Written by vLLM even without --save-detailed: per request, in request order, E2EL in s
    (0.0 for a failure, as vLLM's unset latency) and the client-side wait from its arrival
    (the phase start, or its open-loop offset) to its send, s."""
    ordered = sorted(records, key=lambda r: int(r.index))
    return {
        "latencies": [
            (r.chunk_ns[-1] - _sent_ns(r)) / 1e9 if r.status == "ok" and r.chunk_ns else 0.0
            for r in ordered
        ],
        "queue_times": [
            (r.sent_ns - r.scheduled_ns) / 1e9 if r.sent_ns is not None else 0.0 for r in ordered
        ],
    }


def vllm_bench_result(
    run: RunData, case: str, phase: str, percentiles: Sequence[float] = (99,)
) -> dict[str, Any]:
    """``phase`` of ``case`` as the JSON ``vllm bench serve --save-result`` writes (module
    docstring), without its per-request lists (``--save-detailed``).

    Raises:
        KeyError: no such case or phase in the run.
    """
    data = next(c for c in run.cases if c.name == case)
    spec = next(c for c in run.plan.cases if c.name == case)
    planned = next((p for p in run.plan.phases_of(spec) if p.name == phase), None)
    if planned is None:
        raise KeyError(f"case {case} has no phase {phase}")
    records = [r for r in data.records if r.phase == phase]
    ok = [r for r in records if r.status == "ok" and r.chunk_ns]
    frame = request_frame(ok)
    sent = [int(r.sent_ns) for r in records if r.sent_ns is not None]
    ends = [int(r.end_ns) for r in records if r.end_ns is not None]
    duration = (max(ends) - min(sent)) / 1e9 if sent and ends else 0.0
    total_in = sum(
        r.usage_prompt_tokens if r.usage_prompt_tokens is not None else r.prompt_tokens_sent
        for r in ok
    )  # fmt: skip
    total_out = int(frame["output_tokens"].sum()) if not frame.empty else 0
    goodput = _goodput(run, frame, duration)
    endpoint = getattr(planned.workload, "endpoint", "completions")
    server = data.info.server or {}
    per_sec = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    max_tokens_s, max_active = _buckets(ok)
    result: dict[str, Any] = {
        "date": _date(run.run.started_at),
        "endpoint_type": "openai-chat" if endpoint == "chat" else "vllm",
        "backend": "openai-chat" if endpoint == "chat" else "vllm",
        "label": None,
        "model_id": server.get("model_name"),
        "tokenizer_id": run.plan.sizing.get("prompt_tokens_measured_with")
        or server.get("model_name"),
        "num_prompts": len(records),
        **_arrival_fields(planned),
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_sec(len(ok)),
        "request_goodput": goodput,
        "output_throughput": per_sec(total_out),
        "total_token_throughput": per_sec(total_in + total_out),
        "max_output_tokens_per_s": max_tokens_s,
        "max_concurrent_requests": max_active,
        "rtfx": 0.0,
        **_per_request_lists(records),
    }
    columns = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms"}
    for name in ("ttft", "tpot", "itl", "e2el"):
        if name == "itl":
            values = itl_per_token_ms(ok)
        else:
            values = frame[columns[name]].astype(float).dropna().to_numpy()
        result |= _stats(name, values, percentiles)
    return result


def write_vllm_bench(
    run_dir: Path, out_dir: Path, percentiles: Sequence[float] = (99,)
) -> list[Path]:
    """One ``<case>-<phase>.json`` per phase that sent requests, in ``out_dir``.

    Raises:
        IntegrityError: the run is broken (``analysis.integrity``): nothing is written.
        RunWriteError: a file (or the directory) could not be written.
    """
    run = load_intact_run(run_dir)
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with staged_writes():  # the phases' files as one set: all new, or all as they were
        for spec in run.plan.cases:
            data = next(c for c in run.cases if c.name == spec.name)
            ran = {r.phase for r in data.records}
            for phase in run.plan.phases_of(spec):
                if phase.name not in ran:
                    continue
                result = vllm_bench_result(run, spec.name, phase.name, percentiles)
                path = out_dir / f"{spec.name}-{phase.name}.json"
                write_text(path, dumps(finite_or_none(result), path.name) + "\n")
                written.append(path)
    return written
