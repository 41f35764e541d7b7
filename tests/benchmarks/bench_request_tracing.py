"""Benchmark: what does aiohttp request tracing cost the load generator per request?

The session from ``loadgen.connections.open_session`` traces every request (connection
obtained, request written) for the record's ``connection_ready_ns``, ``new_connection`` and
``request_sent_ns``. This sends requests one at a time (1,024-token prompt, 4 output tokens)
to the zero-delay fake vLLM in its own process, in alternating blocks with tracing on and off
(A B A B, so drift hits both), and prints the load generator's CPU time and wall time per
request for each, and the difference: the per-request cost of tracing.
Run: ``.venv/bin/python tests/benchmarks/bench_request_tracing.py [requests per block]``.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))  # the repository root: tests.support

BLOCKS = 6  # per variant


async def _serve() -> None:
    from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

    fake = FakeOpenAIServer(StreamScript(), keep_seen=False)
    async with fake.serve():
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def _block(url: str, trace: bool, n: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per request over ``n`` sequential requests."""
    from loadgen.client import Target, send_request
    from loadgen.clock import MonotonicClock
    from loadgen.connections import open_session
    from loadgen.records import RequestRecord
    from scenarios.tokens import TokenSpace
    from scenarios.workloads import UniquePrompts, materialize

    plan = materialize(UniquePrompts(prompt_tokens=1024, requests=n, output_tokens=4), "t", 0,
                       TokenSpace())  # fmt: skip
    clock = MonotonicClock()
    async with open_session(read_timeout_s=30, trace=trace) as session:
        target = Target(url, "m")
        cpu = wall = 0.0
        for i in range(n):
            h = plan.header(i)
            record = RequestRecord(h.request_id, "c", "p", i, None, h.prompt_tokens,
                                   h.max_tokens, clock.now_ns())  # fmt: skip
            planned = plan[i]  # prompt building is not part of what is compared
            c0, w0 = time.process_time(), time.perf_counter()
            await send_request(session, target, planned, record, clock)
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            assert record.status == "ok", record.error
            assert (record.request_sent_ns is not None) == trace
    return cpu / n * 1e6, wall / n * 1e6


async def _measure(url: str, n: int) -> dict[bool, list[tuple[float, float]]]:
    await _block(url, True, 50)  # warm imports, pool, server
    out: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(BLOCKS):
        for trace in (False, True):
            out[trace].append(await _block(url, trace, n))
    return out


def main() -> None:
    from server.net.loop import run_event_loop

    if sys.argv[1:2] == ["--serve"]:
        run_event_loop(_serve())
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    server = subprocess.Popen([sys.executable, str(HERE), "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        results = run_event_loop(_measure(url, n))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    cpu_model = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")), "unknown",
    )  # fmt: skip
    print(f"CPU: {cpu_model}; {BLOCKS} blocks × {n} sequential requests per variant")
    med = {t: tuple(statistics.median(b[k] for b in results[t]) for k in (0, 1)) for t in results}
    for trace in (False, True):
        cpu, wall = med[trace]
        print(f"tracing {'on ' if trace else 'off'}: client CPU {cpu:8.1f} µs/request, "
              f"wall {wall:8.1f} µs/request (median of block means)")  # fmt: skip
    print(f"tracing costs {med[True][0] - med[False][0]:+.1f} µs CPU per request "
          f"({med[True][0] / med[False][0]:.3f}× the untraced CPU time)")  # fmt: skip


if __name__ == "__main__":
    main()
