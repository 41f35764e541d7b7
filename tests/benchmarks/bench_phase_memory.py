"""Benchmark 6: the load generator's peak memory for 10,000 and 100,000 requests in one phase.

Every prompt of a phase used to be built up front (a 1,024-token prompt as Python ints is
≈ 37 KB, so 100,000 of them ≈ 3.7 GB) and every request was a coroutine created at once.
This runs one open-loop phase of each size (1,024-token prompts, 4 output tokens, 1,000
req/s) against the zero-delay fake (``sse_server.py``, own process, own core), each phase in a
fresh load-generator process, and records per size:

- baseline RSS: the load generator's RSS just before the phase (imports, session, plan);
- peak RSS: its high-water mark (``VmHWM``) after the phase, and peak / baseline;
- the peak's growth over the baseline, and the largest number of requests in flight
  (memory may grow with requests in flight, never with the phase length).

With ``--eager``, the smallest size runs a second time with the whole plan built up front (a
list of every request, as before the fix), to show in the same run what laziness saves.
No anchor: vLLM's benchmark builds every request up front by design. Target: peak under
500 MB for 100,000 requests.
Run: ``python tests/benchmarks/bench_phase_memory.py [--tiny] [--out DIR] [--eager]``
(takes about N / 1,000 seconds per size).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness as h

from server.net.loop import run_event_loop

NAME = "phase_memory"
HERE = Path(__file__).resolve()
RATE = 1000.0
PROMPT_TOKENS = 1024
TARGET_PEAK_MB = 500.0


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


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


async def _phase(url: str, n: int, eager: bool) -> dict[str, Any]:
    """One open-loop phase of ``n`` requests; memory figures in MiB."""
    from loadgen.client import Target
    from loadgen.clock import MonotonicClock
    from loadgen.connections import open_session
    from loadgen.phase import run_phase
    from loadgen.records import RecordWriter, RequestRecord
    from scenarios.arrivals import OpenLoop
    from scenarios.tokens import TokenSpace
    from scenarios.workloads import UniquePrompts, materialize

    workload = UniquePrompts(prompt_tokens=PROMPT_TOKENS, requests=n, output_tokens=4)
    plan = materialize(workload, "flood", 0, TokenSpace())
    requests = list(plan) if eager else plan
    path = Path(tempfile.mkdtemp()) / "requests.jsonl"
    statuses: dict[str, int] = {}

    def done(record: RequestRecord) -> None:
        statuses[record.status] = statuses.get(record.status, 0) + 1

    async with open_session(read_timeout_s=60) as session:
        with RecordWriter(path) as writer:
            baseline_kib = _status_kib("VmRSS")
            began = time.monotonic()
            timing = await run_phase(
                case="bench",
                phase="flood",
                requests=requests,
                arrival=OpenLoop(rate_rps=RATE, seed=0),
                target=Target(url, h.MODEL),
                session=session,
                writer=writer,
                clock=MonotonicClock(),
                on_done=done,
            )
            wall_s = time.monotonic() - began
            peak_kib = _status_kib("VmHWM")
    return {
        "requests": n,
        "eager": eager,
        "baseline_mib": round(baseline_kib / 1024, 1),
        "peak_mib": round(peak_kib / 1024, 1),
        "growth_mib": round((peak_kib - baseline_kib) / 1024, 1),
        "wall_s": round(wall_s, 1),
        "statuses": statuses,
        "late_sends": timing.late_sends,
        "max_in_flight": _max_in_flight(path),
    }


def _run_child(url: str, n: int, eager: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE), "--child", str(n), "--url", url]
    if eager:
        cmd.append("--eager")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def measure(sizes: list[int], eager: bool) -> dict[str, Any]:
    """Each size in its own load-generator process; rows for the results table."""
    with h.FakeServer() as server:
        runs = [_run_child(server.url, n, eager=False) for n in sizes]
        if eager:
            runs.append(_run_child(server.url, sizes[0], eager=True))
    lazy = [r for r in runs if not r["eager"]]
    rows = []
    for r in lazy:
        is_target = r is lazy[-1]
        peak_mb = round(r["peak_mib"] * 2**20 / 1e6, 1)
        rows.append(
            h.row(
                f"peak RSS, {r['requests']:,} requests in one phase",
                peak_mb,
                None,
                f"< {TARGET_PEAK_MB:g} MB" if is_target else "",
                # A run with failed requests measured a backlog, not the phase: not met.
                peak_mb < TARGET_PEAK_MB and set(r["statuses"]) == {"ok"} if is_target else None,
                "MB",
            )
        )
    growth_ratio = None
    if len(lazy) >= 2:
        growth_ratio = round(lazy[-1]["growth_mib"] / max(lazy[0]["growth_mib"], 1e-9), 2)
    return {
        "config": {
            "sizes": sizes,
            "rate_rps": RATE,
            "prompt_tokens": PROMPT_TOKENS,
            "output_tokens": 4,
        },
        "rows": rows,
        "runs": runs,
        "growth_ratio_largest_to_smallest": growth_ratio,
    }


def run(tiny: bool) -> dict[str, Any]:
    return measure([200, 400] if tiny else [10_000, 100_000], eager=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path, default=h.DEFAULT_OUT)
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        h.pin_self()
        print(json.dumps(run_event_loop(_phase(args.url, args.child, args.eager))), flush=True)
        return
    sys.argv = [sys.argv[0], *(["--tiny"] if args.tiny else []), "--out", str(args.out)]
    if args.eager:
        sizes = [200, 400] if args.tiny else [10_000, 100_000]
        h.bench_main(NAME, lambda _tiny: measure(sizes, eager=True))
    else:
        h.bench_main(NAME, run)


if __name__ == "__main__":
    main()
