"""The two clients' drivers every benchmark runs: ours and the anchor, over one request stream.

Ours is the project's real path (``loadgen.phase.run_phase``: warm-up, records written to a
JSONL file); the anchor is vLLM's request function driven the way ``vllm bench serve`` drives
it (one task per request, an ``asyncio.Semaphore`` for the concurrency, its session settings),
with its pool warmed the same way so neither pays for connects. Both return an
:class:`Outcome` in the same terms.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import MODEL  # also puts the repository root on sys.path


def prompt_ids(i: int, prompt_tokens: int) -> list[int]:
    """Request ``i``'s prompt: its index first (the server keys its log by it), then filler."""
    return [i, *range(100, 100 + prompt_tokens - 1)]


@dataclass
class Outcome:
    """One client's run of ``n`` requests: wall and CPU seconds, per-request figures (ms).

    ``ttft_ms``/``itl_ms``/``e2el_ms``: as each client records them; ``sent_s``: each
    request's send moment (monotonic s); ``failed``: requests that did not succeed.
    ``records``: ours, its request records (JSON lines as dicts; ``request_id`` is ``r`` +
    the request's key); the anchor, per successful request its key, start and TTFT (s).
    ``per_request``: per successful request, in both clients' terms: ``index`` (position in
    the run), ``key``, ``ttft_ms``, ``e2el_ms``, ``itl_ms`` (list), ``sent_ns``,
    ``first_token_ns``, ``stamps_ns`` (the client's stamp of every token, monotonic ns: a
    stamp that carried k tokens counts k times) and ``stamp_tokens`` (tokens per stamp).
    ``loop_lag_p99_ms``/``loop_lag_max_ms``: ours, its sending loop's lag over the run.
    """

    wall_s: float
    cpu_s: float
    ttft_ms: list[float]
    itl_ms: list[float]
    e2el_ms: list[float]
    sent_s: list[float]
    failed: int
    chunks: int
    records: list[dict[str, Any]]
    per_request: list[dict[str, Any]]
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None


Tokens = int | Callable[[int], int]


def _tokens_of(tokens: Tokens) -> Callable[[int], int]:
    """Output tokens of request ``i`` of a run: a constant, or a function of ``i``."""
    return tokens if callable(tokens) else (lambda _i: tokens)


# -- ours --------------------------------------------------------------------------------------


def _phase_requests(n: int, first_index: int, prompt_tokens: int, tokens_of: Any) -> Any:
    """The ``PhaseRequests`` of a run: request ``i`` is keyed ``r<first_index + i>``."""
    from scenarios.requests import PhaseRequests, PlannedRequest, RequestHeader

    def build(i: int) -> PlannedRequest:
        ids = tuple(prompt_ids(first_index + i, prompt_tokens))
        return PlannedRequest(f"r{first_index + i}", ids, tokens_of(i))

    return PhaseRequests(
        n,
        build,
        lambda i: RequestHeader(f"r{first_index + i}", None, prompt_tokens, tokens_of(i)),
    )


async def _run_ours(
    url: str, plan: Any, arrival: Any
) -> tuple[list[dict[str, Any]], Any, float, float]:
    """Run one phase with the project's client; its records, phase timing, wall and CPU s."""
    from loadgen.client import Target
    from loadgen.clock import MonotonicClock
    from loadgen.connections import open_session
    from loadgen.phase import run_phase
    from loadgen.records import RecordWriter

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        async with open_session(read_timeout_s=120) as session:
            with RecordWriter(path) as writer:
                cpu0, wall0 = time.process_time(), time.perf_counter()
                timing = await run_phase(
                    case="bench",
                    phase="bench",
                    requests=plan,
                    arrival=arrival,
                    target=_target(Target, url),
                    session=session,
                    writer=writer,
                    clock=MonotonicClock(),
                )
                wall = time.perf_counter() - wall0
                cpu = time.process_time() - cpu0
        records = [json.loads(line) for line in path.read_text().splitlines()]
    return records, timing, wall, cpu


def _ours_per_request(
    ok: list[dict[str, Any]], typed: list[Any], frame: Any, first_index: int
) -> list[dict[str, Any]]:
    """``Outcome.per_request`` from ours's successful records (JSON and typed) and frame."""
    from analysis.latency import itl_per_token_ms

    return [
        {
            "index": r["index"],
            "key": first_index + r["index"],
            "ttft_ms": float(ttft),
            "e2el_ms": float(e2el),
            "itl_ms": [float(x) for x in itl_per_token_ms([t])],
            "sent_ns": r["sent_ns"],
            "first_token_ns": r["chunk_ns"][0],
            "stamps_ns": [
                ns for ns, k in zip(r["chunk_ns"], r["chunk_tokens"], strict=True) for _ in range(k)
            ],
            "stamp_tokens": r["chunk_tokens"],
        }
        for r, t, ttft, e2el in zip(
            ok,
            typed,
            frame["ttft_ms"] if ok else [],
            frame["e2el_ms"] if ok else [],
            strict=True,
        )
    ]


async def ours(
    url: str,
    n: int,
    *,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    seed: int = 0,
    max_tokens: Tokens,
    prompt_tokens: int = 32,
    first_index: int = 0,
) -> Outcome:
    """Send ``n`` requests with the project's client: a closed loop of ``concurrency``
    streams, or an open loop at ``rate_rps`` (Poisson). ``max_tokens`` of request ``i``: a
    constant or a function of ``i``."""
    import msgspec

    from analysis.latency import itl_per_token_ms, request_frame
    from loadgen.runformat import ReadRecord
    from scenarios.arrivals import ClosedLoop, OpenLoop

    plan = _phase_requests(n, first_index, prompt_tokens, _tokens_of(max_tokens))
    arrival: ClosedLoop | OpenLoop
    if rate_rps is not None:
        arrival = OpenLoop(rate_rps=rate_rps, seed=seed)
    else:
        assert concurrency is not None
        arrival = ClosedLoop(concurrency=concurrency)
    records, timing, wall, cpu = await _run_ours(url, plan, arrival)
    ok = [r for r in records if r["status"] == "ok"]
    typed = [msgspec.convert(r, ReadRecord, strict=True) for r in ok]  # as analysis reads them
    frame = request_frame(typed)
    ends = [r["end_ns"] for r in records if r["end_ns"] is not None]
    sends = [r["sent_ns"] for r in records if r["sent_ns"] is not None]
    if ends and sends:
        wall = (max(ends) - min(sends)) / 1e9  # first send to last end, as the anchor's
    return Outcome(
        wall_s=wall,
        cpu_s=cpu,
        per_request=_ours_per_request(ok, typed, frame, first_index),
        ttft_ms=[float(x) for x in frame["ttft_ms"]] if ok else [],
        itl_ms=[float(x) for x in itl_per_token_ms(typed)],
        e2el_ms=[float(x) for x in frame["e2el_ms"]] if ok else [],
        sent_s=[r["sent_ns"] / 1e9 for r in records if r["sent_ns"] is not None],
        failed=len(records) - len(ok),
        chunks=sum(r["usage_completion_tokens"] or 0 for r in ok),
        records=records,
        loop_lag_p99_ms=timing.loop_lag_p99_ms,
        loop_lag_max_ms=timing.loop_lag_max_ms,
    )


def _target(cls: Callable[[str, str], Any], url: str) -> Any:
    return cls(url, MODEL)


# -- the anchor --------------------------------------------------------------------------------


def anchor_session(concurrency: int | None) -> Any:
    """The session ``vllm bench serve`` opens (``serve.py``: connector and timeout)."""
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=concurrency or 0,
        limit_per_host=concurrency or 0,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    return aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    )


def _anchor_per_request(outputs: Sequence[Any], first_index: int) -> list[dict[str, Any]]:
    """``Outcome.per_request`` from vLLM's request outputs (successful ones only)."""
    return [
        {
            "index": i,
            "key": first_index + i,
            "ttft_ms": o.ttft * 1e3,
            "e2el_ms": o.latency * 1e3,
            "itl_ms": [x * 1e3 for x in o.itl],
            "sent_ns": o.start_time * 1e9,
            "first_token_ns": (o.start_time + o.ttft) * 1e9,
            # Its stamps, rebuilt as it took them: first token at start + TTFT, then each
            # message's gap to the one before (``itl``, one per message after the first).
            "stamps_ns": anchor_stamps_ns(o.start_time, o.ttft, o.itl),
            "stamp_tokens": [1] * (1 + len(o.itl)),
        }
        for i, o in enumerate(outputs)
        if o.success
    ]


async def _run_anchor(
    client: Any, get_request: Any, url: str, inputs: list[Any], concurrency: int | None,
    rate_rps: float | None, warm_n: int,
) -> tuple[list[Any], float, float]:  # fmt: skip
    """Send ``inputs`` with vLLM's ``client`` and ``get_request`` as ``vllm bench serve``
    does, after warming ``warm_n`` connections (at most 256); the outputs, wall and CPU s."""
    from loadgen.clock import MonotonicClock
    from loadgen.connections import warm_up

    semaphore = asyncio.Semaphore(concurrency) if concurrency else None
    async with anchor_session(concurrency) as session:
        await warm_up(session, url, min(warm_n, 256), MonotonicClock())

        async def limited(item: Any) -> Any:
            if semaphore is None:
                return await client.request_func(request_func_input=item, session=session)
            async with semaphore:
                return await client.request_func(request_func_input=item, session=session)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        tasks = []
        async for item, _rate in get_request(inputs, rate_rps or float("inf"), 1.0):
            tasks.append(asyncio.create_task(limited(item)))
        outputs = await asyncio.gather(*tasks)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
    return outputs, wall, cpu


async def anchor(
    url: str,
    n: int,
    *,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    seed: int = 0,
    max_tokens: Tokens,
    prompt_tokens: int = 32,
    first_index: int = 0,
    warm: int | None = None,
) -> Outcome:
    """Send ``n`` requests with vLLM's request function, driven as ``vllm bench serve``
    drives it: ``get_request`` (``rate_rps``; ``inf`` when ``None``), one task per request,
    a semaphore of ``concurrency``. The pool is warmed with ``warm`` connections first
    (default: ``concurrency``), as ours is."""
    import numpy as np
    from anchors import vllm_client, vllm_get_request

    client = vllm_client()
    get_request = vllm_get_request()
    tokens_of = _tokens_of(max_tokens)
    assert client is not None and get_request is not None, "vLLM is not installed"
    inputs = [
        client.input_type(
            prompt=prompt_ids(first_index + i, prompt_tokens),
            api_url=f"{url}/v1/completions",
            prompt_len=prompt_tokens,
            output_len=tokens_of(i),
            model=MODEL,
            ignore_eos=True,
        )
        for i in range(n)
    ]
    np.random.seed(seed)
    warm_n = warm if warm is not None else (concurrency or 0)
    outputs, wall, cpu = await _run_anchor(
        client, get_request, url, inputs, concurrency, rate_rps, warm_n
    )
    ok = [o for o in outputs if o.success]
    if ok:  # first send to last token, as ours (its stream end is not recorded)
        wall = max(o.start_time + o.latency for o in ok) - min(o.start_time for o in outputs)
    return Outcome(
        wall_s=wall,
        cpu_s=cpu,
        per_request=_anchor_per_request(outputs, first_index),
        ttft_ms=[o.ttft * 1e3 for o in ok],
        itl_ms=[x * 1e3 for o in ok for x in o.itl],
        e2el_ms=[o.latency * 1e3 for o in ok],
        sent_s=[o.start_time for o in outputs],
        failed=len(outputs) - len(ok),
        chunks=sum(o.output_tokens or 0 for o in ok),
        records=[
            {"key": first_index + i, "start_s": o.start_time, "ttft_s": o.ttft}
            for i, o in enumerate(outputs)
            if o.success
        ],
    )


def anchor_stamps_ns(start_s: float, ttft_s: float, itl_s: Sequence[float]) -> list[float]:
    """vLLM's request function's stamp of every message (monotonic ns): its request start
    (``time.perf_counter()``, CLOCK_MONOTONIC on Linux, the clock ours stamps with) plus TTFT,
    then the running sum of its ITLs (each a gap to the message before)."""
    stamps = [(start_s + ttft_s) * 1e9]
    for gap in itl_s:
        stamps.append(stamps[-1] + gap * 1e9)
    return stamps
