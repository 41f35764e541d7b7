"""Benchmark: does the load generator's memory grow with the length of a phase?

Issue 10: every prompt of a phase was built up front (a 1,024-token prompt as Python ints is
≈ 37 KB, so 100,000 of them ≈ 3.7 GB) and every request was a coroutine created at once.
This runs one open-loop phase of each size (default 10,000 and 100,000 requests, 1,024-token
prompts, 4 output tokens) against the zero-delay fake vLLM (``tests/loadgen``) served by its
own process, each phase in a fresh load-generator process, and prints per size:

- baseline RSS: the load generator's RSS just before the phase (imports, session, plan);
- peak RSS: its high-water mark (``VmHWM``) after the phase, and peak / baseline;
- the peak's growth over the baseline, and the largest number of requests in flight
  (memory may grow with requests in flight, never with the phase length).

With ``--eager``, the smallest size runs a second time with the whole plan built up front (a
list of every request, as before the fix), to show in the same run what laziness saves.
Target: peak under 500 MB for 100,000 requests.
Run: ``.venv/bin/python tests/benchmarks/bench_phase_memory.py [--sizes 10000,100000]
[--rate 1000] [--prompt-tokens 1024] [--eager]`` (takes about N / rate seconds per size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "loadgen"))  # fake_openai_server


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


async def _serve() -> None:
    """The fake vLLM until stdin closes; prints its URL first."""
    from fake_openai_server import FakeOpenAIServer, StreamScript

    fake = FakeOpenAIServer(StreamScript(), keep_seen=False)
    async with fake.serve():
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def _max_in_flight(path: Path) -> int:
    """Largest number of requests between their send and end (sweep over all stamps)."""
    events: list[tuple[int, int]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["sent_ns"] is not None and r["end_ns"] is not None:
                events += [(r["sent_ns"], 1), (r["end_ns"], -1)]
    events.sort(key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


async def _phase(url: str, n: int, rate: float, prompt_tokens: int, eager: bool) -> dict:
    """One open-loop phase of ``n`` requests; memory figures in MiB."""
    from loadgen.client import Target
    from loadgen.clock import MonotonicClock
    from loadgen.connections import open_session
    from loadgen.phase import run_phase
    from loadgen.records import RecordWriter
    from scenarios.arrivals import OpenLoop
    from scenarios.workloads import TokenSpace, UniquePrompts, materialize

    workload = UniquePrompts(prompt_tokens=prompt_tokens, requests=n, output_tokens=4)
    plan = materialize(workload, "flood", 0, TokenSpace())
    requests = list(plan) if eager else plan
    path = Path(tempfile.mkdtemp()) / "requests.jsonl"
    statuses: dict[str, int] = {}

    def done(record: object) -> None:
        status = getattr(record, "status", "?")
        statuses[status] = statuses.get(status, 0) + 1

    async with open_session(read_timeout_s=60) as session:
        with RecordWriter(path) as writer:
            baseline_kib = _status_kib("VmRSS")
            began = time.monotonic()
            timing = await run_phase(
                case="bench", phase="flood", requests=requests,
                arrival=OpenLoop(rate_rps=rate, seed=0), target=Target(url, "m"),
                session=session, writer=writer, clock=MonotonicClock(), on_done=done,
            )  # fmt: skip
            wall_s = time.monotonic() - began
            peak_kib = _status_kib("VmHWM")
    return {
        "requests": n,
        "eager": eager,
        "baseline_mib": baseline_kib / 1024,
        "peak_mib": peak_kib / 1024,
        "wall_s": wall_s,
        "statuses": statuses,
        "late_sends": timing.late_sends,
        "max_in_flight": _max_in_flight(path),
    }


def _child(args: argparse.Namespace) -> None:
    import uvloop

    result = uvloop.run(_phase(args.url, args.child, args.rate, args.prompt_tokens, args.eager))
    print(json.dumps(result), flush=True)


def _run_child(url: str, n: int, args: argparse.Namespace, eager: bool) -> dict:
    cmd = [sys.executable, str(HERE), "--child", str(n), "--url", url, "--rate", str(args.rate),
           "--prompt-tokens", str(args.prompt_tokens)]  # fmt: skip
    if eager:
        cmd.append("--eager")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvloop

        uvloop.run(_serve())
        return
    if args.child is not None:
        _child(args)
        return

    server = subprocess.Popen(
        [sys.executable, str(HERE), "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        sizes = [int(x) for x in args.sizes.split(",")]
        runs = [_run_child(url, n, args, eager=False) for n in sizes]
        if args.eager:
            runs.append(_run_child(url, sizes[0], args, eager=True))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)

    print(f"CPU: {_cpu_model()}; open loop {args.rate:g} req/s, {args.prompt_tokens}-token "
          "prompts, 4 output tokens, fake vLLM in its own process")  # fmt: skip
    print(f"{'requests':>9} {'plan':>5} {'baseline MiB':>12} {'peak MiB':>9} {'peak/base':>9} "
          f"{'growth MiB':>10} {'in flight':>9} {'wall s':>7}  statuses")  # fmt: skip
    for r in runs:
        growth = r["peak_mib"] - r["baseline_mib"]
        print(f"{r['requests']:>9} {'eager' if r['eager'] else 'lazy':>5} "
              f"{r['baseline_mib']:>12.1f} {r['peak_mib']:>9.1f} "
              f"{r['peak_mib'] / r['baseline_mib']:>9.2f} {growth:>10.1f} "
              f"{r['max_in_flight']:>9} {r['wall_s']:>7.1f}  {r['statuses']}")  # fmt: skip
    lazy = [r for r in runs if not r["eager"]]
    if len(lazy) >= 2:
        small, large = lazy[0], lazy[-1]
        ratio = (large["peak_mib"] - large["baseline_mib"]) / max(
            small["peak_mib"] - small["baseline_mib"], 1e-9
        )
        print(f"growth ratio {large['requests']} / {small['requests']} requests: {ratio:.2f} "
              f"(phase {large['requests'] / small['requests']:.0f}× longer)")  # fmt: skip


if __name__ == "__main__":
    main()
