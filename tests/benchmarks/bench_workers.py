"""Benchmark: how far worker processes and Ray actors scale the load generator.

Against a zero-delay fake vLLM (a raw asyncio server in its own process that answers every
request with a prebuilt SSE body of one token per event, so serving costs it almost nothing
and the client's parsing is what is measured), in one run:

1. **chunks/s** (token events received per second, over a closed-loop phase) with one worker
   (the run's own process, ``--workers 1``), two worker processes, and, through a local
   two-node Ray cluster (``ray.cluster_utils.Cluster``), one and two actors. Ratios are to
   the one-worker figure of the same run. Target: two workers ≥ 1.8× one on 2 cores.
2. **open loop at a rate one worker cannot hold**: the one-worker request capacity is
   measured first (a closed loop of the same short requests); then one worker and two
   workers each get an open-loop Poisson phase at ``--overload`` × that capacity. Shown per
   run: requested rate, the schedule's own rate (its n − 1 gaps), the achieved send rate
   ((n − 1) / (last send − first send)) and its ratio to the schedule's, send lateness
   (sent − scheduled) p50/p99/max and loop lag. A sender *holds* a rate when it sends within
   1 % of its schedule's rate with lateness p99 < 2 ms. Target: at a swept rate one worker
   cannot hold, two workers hold it; every rate two workers did not hold is listed beside
   the verdict (unmet if no swept rate defeats one worker).

Each part runs once per ``--client-priority`` mode (default ``auto,realtime``), with every
sender placed as ``loadgen run`` places it against a server on another host
(``loadgen.placement``): as the kernel places them with ``auto`` (the default there); with
``realtime`` each worker process on a core of its own (the single process on all), its
sending thread at ``SCHED_FIFO`` 1. Ray actors (both "nodes" are this machine) likewise. Real-time
senders run flat out in the chunks part and take the cores from the fake server, which shares
them here (a real server elsewhere would not); in the open-loop part they are not saturated
and wake on time.

Timing-sensitive: run it under the machine lock, with nothing else running.
Run: ``flock /tmp/serving-testbed-vllm.lock .venv/bin/python tests/benchmarks/bench_workers.py
[--out FILE] [--no-ray] [--client-priority auto,realtime]`` (about three minutes; the JSON goes
to ``runs/bench_workers-<UTC time>.json`` unless ``--out`` says otherwise). Figures measured
with it: docs/scaling-out.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar, get_args

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))

#: Closed-loop chunk benchmark: requests of this many tokens, this many in flight.
CHUNK_TOKENS = 256
CHUNK_CONCURRENCY = 64
CHUNK_REQUESTS = 1500
#: Open-loop benchmark: short requests (a read carries at most this many events).
OPEN_TOKENS = 16
OPEN_SECONDS = 10.0
#: The issue's throughput target: two worker processes give this many times one's chunks/s.
CHUNK_TARGET_RATIO = 1.8
#: A sender holds a rate: achieved send rate within this fraction of its schedule's rate...
HOLD_RATE_TOLERANCE = 0.01
#: ...and send lateness p99 below this (ms).
HOLD_LATENESS_P99_MS = 2.0


# --- the zero-delay fake server -------------------------------------------------------------

_BODY_RE = re.compile(rb'"max_tokens":(\d+)')
_PROMPT_RE = re.compile(rb'"prompt":\[([^\]]*)\]')


def _sse_body(prompt: int, tokens: int) -> bytes:
    events = []
    for i in range(tokens):
        finish = '"length"' if i == tokens - 1 else "null"
        events.append(
            '{"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":'
            f'[{{"index":0,"text":"~","logprobs":null,"finish_reason":{finish},'
            '"stop_reason":null}],"usage":'
            f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + i + 1},'
            f'"completion_tokens":{i + 1}}}}}'
        )
    events.append(
        '{"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[],'
        f'"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt + tokens},'
        f'"completion_tokens":{tokens},"prompt_tokens_details":{{"cached_tokens":0}}}}}}'
    )
    events.append("[DONE]")
    return "".join(f"data: {e}\n\n" for e in events).encode()


class _FakeProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every POST gets its prebuilt SSE body in one write."""

    cache: ClassVar[dict[tuple[int, int], bytes]] = {}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].lower()
            m = re.search(rb"content-length: *(\d+)", head)
            length = int(m.group(1)) if m else 0
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            if head.startswith(b"get"):
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                continue
            tokens = int(_BODY_RE.search(body).group(1))  # type: ignore[union-attr]
            prompt_m = _PROMPT_RE.search(body)
            prompt = prompt_m.group(1).count(b",") + 1 if prompt_m else 0
            key = (prompt, tokens)
            if key not in self.cache:
                sse = _sse_body(prompt, tokens)
                self.cache[key] = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + f"Content-Length: {len(sse)}\r\n\r\n".encode()
                    + sse
                )
            self.transport.write(self.cache[key])


async def _serve() -> None:
    # Below the load generator's priority: on 2 cores the fake shares the CPU with it, and a
    # worker waiting for the fake's time slice would be measured as its own lateness.
    os.nice(10)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_FakeProtocol, "127.0.0.1", 0)
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)


# --- phases -----------------------------------------------------------------------------------


def _records(path_or_dir: Path) -> list[Any]:
    from loadgen.runformat.record_files import read_records

    return read_records(path_or_dir).records


def _figures(records: list[Any], timing: Any, rate: float | None) -> dict[str, Any]:
    import numpy as np

    ok = [r for r in records if r.status == "ok"]
    chunks = sum(sum(r.chunk_tokens) for r in ok)
    duration_s = (timing.last_end_ns - timing.start_ns) / 1e9
    out: dict[str, Any] = {
        "requests": len(records),
        "ok": len(ok),
        "chunks": chunks,
        "duration_s": round(duration_s, 3),
        "chunks_per_s": round(chunks / duration_s),
        "requests_per_s": round(len(ok) / duration_s, 1),
        "loop_lag_p99_ms": timing.loop_lag_p99_ms,
        "loop_lag_max_ms": timing.loop_lag_max_ms,
    }
    if rate is not None:
        sent = sorted(r.sent_ns for r in records if r.sent_ns is not None)
        scheduled = sorted(r.scheduled_ns for r in records)
        late_ms = np.array([(r.sent_ns - r.scheduled_ns) / 1e6 for r in records
                            if r.sent_ns is not None])  # fmt: skip
        schedule_rate = (len(scheduled) - 1) / ((scheduled[-1] - scheduled[0]) / 1e9)
        send_rate = (len(sent) - 1) / ((sent[-1] - sent[0]) / 1e9)
        out.update(
            requested_rate=round(rate, 1),
            schedule_rate=round(schedule_rate, 1),
            send_rate=round(send_rate, 1),
            send_over_schedule=round(send_rate / schedule_rate, 4),
            lateness_p50_ms=round(float(np.percentile(late_ms, 50)), 3),
            lateness_p99_ms=round(float(np.percentile(late_ms, 99)), 3),
            lateness_max_ms=round(float(late_ms.max()), 3),
            late_sends_over_10ms=timing.late_sends,
        )
    return out


def _phase(name: str, n: int, tokens: int, arrival: Any) -> Any:
    from scenarios.plan import PhaseSpec
    from scenarios.workloads import UniquePrompts

    return PhaseSpec(
        name=name,
        workload=UniquePrompts(prompt_tokens=4, requests=n, output_tokens=tokens),
        arrival=arrival,
    )


#: How every sender is placed (``--client-priority``; set by :func:`main`).
PLACEMENT: Any = None


def _placement(mode: str) -> Any:
    """The senders' placement for ``mode`` as ``loadgen run --client-priority MODE`` places
    them against a server on another host (the fake here stands in for it): ``auto`` and
    ``normal`` as the kernel places them, ``realtime`` each worker on a core of its own with
    its sending thread real-time."""
    from loadgen.placement import choose_placement

    return choose_placement(mode, os.sched_getaffinity(0), False, None)  # type: ignore[arg-type]


async def _one_process(url: str, phase: Any, rate: float | None) -> dict[str, Any]:
    """``--workers 1``: the phase sent by this process's own loop."""
    from loadgen.client import Target
    from loadgen.clock import MonotonicClock
    from loadgen.connections import open_session
    from loadgen.phase import heap_frozen, run_phase
    from loadgen.placement import placed
    from loadgen.records import RecordWriter
    from scenarios.tokens import TokenSpace
    from scenarios.workloads import materialize

    path = Path(tempfile.mkdtemp()) / "requests.jsonl"
    requests = materialize(phase.workload, phase.name, 0, TokenSpace())
    async with open_session(read_timeout_s=60) as session:
        # As `loadgen run` does: placed, the heap frozen.
        with RecordWriter(path) as writer, heap_frozen(), placed(PLACEMENT) as applied:
            timing = await run_phase(
                case="bench", phase=phase.name, requests=requests, arrival=phase.arrival,
                target=Target(url, "m"), session=session, writer=writer, clock=MonotonicClock(),
            )  # fmt: skip
    out = _figures(_records(path.parent), timing, rate)
    out["placement"] = [applied.as_dict()]
    return out


async def _with_pool(pool: Any, cdir: Path, url: str, phase: Any, rate: float | None) -> dict:
    from loadgen.client import Target
    from loadgen.clock import MonotonicClock
    from loadgen.workers.process import run_split_phase
    from scenarios.tokens import TokenSpace

    split = await run_split_phase(
        pool, case="bench", phase=phase, seed=0, tokens=TokenSpace(), target=Target(url, "m"),
        clock=MonotonicClock(),
    )  # fmt: skip
    await pool.gather_records(cdir)
    out = _figures(_records(cdir), split.timing, rate)
    out["per_worker_loop_lag_p99_ms"] = [w["loop_lag_p99_ms"] for w in split.workers]
    if split.offsets:
        out["clock_offset_bound_ms"] = [o.bound_ns / 1e6 for o in split.offsets]
    out["placement"] = [a.as_dict() if a else None for a in await pool.placements()]
    return out


async def _processes(n: int, url: str, phase: Any, rate: float | None) -> dict[str, Any]:
    from loadgen.workers.process import ProcessWorkers

    cdir = Path(tempfile.mkdtemp())
    pool = await ProcessWorkers(n, cdir, pool_limit=0, read_timeout_s=60,
                                placement=PLACEMENT).start()  # fmt: skip
    try:
        return await _with_pool(pool, cdir, url, phase, rate)
    finally:
        await pool.close()


async def _ray(n: int, url: str, phase: Any, rate: float | None) -> dict[str, Any]:
    from loadgen.workers.ray import RayWorkers

    cdir = Path(tempfile.mkdtemp())
    pool = await RayWorkers.start("auto", n, cdir, pool_limit=0, read_timeout_s=60,
                                  placement=PLACEMENT)  # fmt: skip
    try:
        out = await _with_pool(pool, cdir, url, phase, rate)
        out["nodes"] = pool.nodes()
        return out
    finally:
        await pool.close()


def _cpu() -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text()
    field = dict(line.split(":", 1) for line in info.splitlines() if ":" in line and "\t" in line)
    flags = set(field.get("flags\t\t", "").split())
    return {
        "model": field.get("model name\t", "?").strip(),
        "family": field.get("cpu family\t", "?").strip(),
        "model_number": field.get("model\t\t", "?").strip(),
        "cores": len(__import__("os").sched_getaffinity(0)),
        "avx512": sorted(f for f in flags if f.startswith("avx512")),
        "amx": sorted(f for f in flags if f.startswith("amx")),
    }


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, str(HERE), "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    result: dict[str, Any] = {"cpu": _cpu(), "url": url, "modes": {}}
    global PLACEMENT
    try:
        for mode in args.client_priority.split(","):
            PLACEMENT = _placement(mode)
            runs: dict[str, Any] = {"placement_reason": PLACEMENT.reason}
            if "chunks" in args.parts:
                runs["chunks"] = await _chunks(args, url)
            if "open" in args.parts:
                runs["open_loop"] = await _open_loop(args, url)
            result["modes"][mode] = runs
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
    return result


async def _chunks(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from scenarios.arrivals import ClosedLoop

    cluster = None
    try:
        chunk = _phase("chunks", int(CHUNK_REQUESTS * args.scale), CHUNK_TOKENS,
                       ClosedLoop(concurrency=CHUNK_CONCURRENCY))  # fmt: skip
        await _one_process(url, _phase("warm", 200, CHUNK_TOKENS, ClosedLoop(concurrency=16)),
                           None)  # fmt: skip
        runs: dict[str, Any] = {}
        runs["1 worker (this process)"] = await _one_process(url, chunk, None)
        runs["2 worker processes"] = await _processes(2, url, chunk, None)
        if not args.no_ray:
            import logging

            import ray
            from ray.cluster_utils import Cluster

            head = {"num_cpus": 1, "include_dashboard": False}
            cluster = Cluster(initialize_head=True, head_node_args=head)
            cluster.add_node(num_cpus=1)
            ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
            cluster.wait_for_nodes()
            runs["1 Ray actor"] = await _ray(1, url, chunk, None)
            runs["2 Ray actors (one per node)"] = await _ray(2, url, chunk, None)
        base = runs["1 worker (this process)"]["chunks_per_s"]
        for r in runs.values():
            r["ratio_to_1_worker"] = round(r["chunks_per_s"] / base, 3)
        return {"tokens_per_request": CHUNK_TOKENS, "concurrency": CHUNK_CONCURRENCY,
                "runs": runs}  # fmt: skip
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()


async def _open_loop(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from scenarios.arrivals import ClosedLoop, OpenLoop

    capacity_phase = _phase(
        "capacity", int(4000 * args.scale), OPEN_TOKENS, ClosedLoop(concurrency=64)
    )
    capacity = (await _one_process(url, capacity_phase, None))["requests_per_s"]
    rates = []
    for factor in (float(x) for x in args.overload.split(",")):
        rate = factor * capacity
        n = int(rate * OPEN_SECONDS * args.scale)
        phase = _phase("open", n, OPEN_TOKENS, OpenLoop(rate_rps=rate, seed=0))
        rates.append({
            "factor": factor,
            "runs": {
                "1 worker (this process)": await _one_process(url, phase, rate),
                "2 worker processes": await _processes(2, url, phase, rate),
            },
        })  # fmt: skip
    return {"tokens_per_request": OPEN_TOKENS, "one_worker_capacity_req_s": capacity,
            "rates": rates, "target": open_loop_target(rates)}  # fmt: skip


def holds(run: dict[str, Any]) -> bool:
    """Whether one open-loop run held its rate: sent within ``HOLD_RATE_TOLERANCE`` of its
    schedule's rate with send lateness p99 < ``HOLD_LATENESS_P99_MS``."""
    return (
        abs(run["send_over_schedule"] - 1) <= HOLD_RATE_TOLERANCE + 1e-12  # 1.01 is within
        and run["lateness_p99_ms"] < HOLD_LATENESS_P99_MS
    )


def open_loop_target(rates: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's target over a sweep ("a 2-worker open-loop phase at a rate one worker
    cannot hold holds its rate"): the factors one worker could not hold, those of them two
    workers held and those they did not; ``met`` = two workers held at least one of them."""
    beyond_one = [e["factor"] for e in rates if not holds(e["runs"]["1 worker (this process)"])]
    two_held = {e["factor"]: holds(e["runs"]["2 worker processes"]) for e in rates}
    return {
        "beyond_one_worker": beyond_one,
        "held_by_two_workers": [f for f in beyond_one if two_held[f]],
        "missed_by_two_workers": [f for f in two_held if not two_held[f]],
        "met": any(two_held[f] for f in beyond_one),
    }


def _print(result: dict[str, Any]) -> None:
    cpu = result["cpu"]
    print(f"CPU: {cpu['model']} (family {cpu['family']} model {cpu['model_number']}), "
          f"{cpu['cores']} cores, {', '.join(cpu['avx512']) or 'no AVX-512'}, "
          f"{', '.join(cpu['amx']) or 'no AMX'}")  # fmt: skip
    for mode, runs in result["modes"].items():
        print(f"\n== senders as --client-priority {mode} places them against a server on "
              f"another host: {runs['placement_reason']}")  # fmt: skip
        if runs.get("chunks"):
            _print_chunks(runs["chunks"])
        if runs.get("open_loop"):
            _print_open(runs["open_loop"])


def _print_chunks(c: dict[str, Any]) -> None:
    print(f"\nchunks/s, closed loop of {c['concurrency']} × {c['tokens_per_request']}-token "
          "streams against the zero-delay fake:")  # fmt: skip
    for name, r in c["runs"].items():
        print(f"  {name:<28} {r['chunks_per_s']:>9,} chunks/s  ×{r['ratio_to_1_worker']:.2f}  "
              f"loop lag p99 {r['loop_lag_p99_ms']} ms")  # fmt: skip
    two = c["runs"]["2 worker processes"]["ratio_to_1_worker"]
    print(
        f"  target (2 worker processes ≥ {CHUNK_TARGET_RATIO}× one): "
        f"{'met' if two >= CHUNK_TARGET_RATIO else 'MISSED'} (×{two:.2f})"
    )


def _print_open(o: dict[str, Any]) -> None:
    print(f"\nopen loop (Poisson) of {o['tokens_per_request']}-token requests; one worker's "
          f"closed-loop capacity {o['one_worker_capacity_req_s']} req/s:")  # fmt: skip
    for entry in o["rates"]:
        print(f"  at {entry['factor']} × that capacity:")
        for name, r in entry["runs"].items():
            print(f"    {name:<26} asked {r['requested_rate']} req/s, schedule "
                  f"{r['schedule_rate']}, sent {r['send_rate']} (×{r['send_over_schedule']}), "
                  f"lateness p50 {r['lateness_p50_ms']} / p99 {r['lateness_p99_ms']} / max "
                  f"{r['lateness_max_ms']} ms, loop lag p99 {r['loop_lag_p99_ms']} ms, "
                  f"{'holds' if holds(r) else 'does not hold'}")  # fmt: skip
    t = o["target"]
    print(f"  target (two workers hold a rate one cannot; hold = within "
          f"{HOLD_RATE_TOLERANCE:.0%} of schedule, lateness p99 < {HOLD_LATENESS_P99_MS} ms): "
          f"{'met' if t['met'] else 'MISSED'}; one worker could not hold "
          f"{t['beyond_one_worker'] or 'any swept rate'}, two held "
          f"{t['held_by_two_workers']}, two did not hold {t['missed_by_two_workers']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    # A git-ignored file by default: a benchmark never writes into the checkout's tracked tree.
    default_out = HERE.parents[2] / "runs" / f"bench_workers-{stamp}.json"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--overload", default="0.5,0.6,0.7",
                        help="Open-loop rates as multiples of one worker's closed-loop "
                        "capacity, comma-separated.")  # fmt: skip
    parser.add_argument("--parts", default="chunks,open", help="chunks, open or both.")
    parser.add_argument("--no-ray", action="store_true", help="Skip the Ray runs.")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="Multiply each phase's request count (quick check: 0.1).")  # fmt: skip
    parser.add_argument("--client-priority", default="auto,realtime",
                        help="Comma-separated --client-priority modes to measure every part "
                        "with (auto, realtime, normal).")  # fmt: skip
    args = parser.parse_args()
    from server.net.loop import run_event_loop

    if args.serve:  # the fake server's process: nothing else of the project imported
        run_event_loop(_serve())
        return
    from scenarios.plan import ClientPriority

    for mode in args.client_priority.split(","):
        if mode not in get_args(ClientPriority):
            parser.error(f"--client-priority: unknown mode {mode!r}")
    result = run_event_loop(_main(args))
    result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    _print(result)
    print(f"\n{args.out}")


if __name__ == "__main__":
    main()
