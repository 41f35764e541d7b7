"""What every benchmark shares: core pinning, the fake server process, statistics, the
machine's description and the JSON result file (the two clients' drivers: ``drivers.py``).

Placement on a 2-core machine: the load generator (this process) on core 0, the fake server
(``sse_server.py``) on core 1, each alone where it matters, so neither steals the other's CPU.
Both clients run on the same event loop (uvloop, what ``loadgen`` runs on), against the same
server, pinned the same way, alternating A B A B within one run: what differs is only the
request path. Ours is the project's real path (``loadgen.phase.run_phase``: warm-up, records
written to a JSONL file); the anchor is driven the way ``vllm bench serve`` drives it (one task
per request, an ``asyncio.Semaphore`` for the concurrency, its session settings), with its pool
warmed the same way so neither pays for connects.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Measure the checkout these files are in, whatever the virtualenv's editable install points at.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
METRICS_PAGE = REPO / "tests" / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
CLIENT_CPU = 0
SERVER_CPU = 1
MODEL = "m"


# -- placement ---------------------------------------------------------------------------------


# Decided once, before this process pins itself: two or more usable cores and ``taskset``.
_PINNABLE = len(os.sched_getaffinity(0)) >= 2 and shutil.which("taskset") is not None


_pinning = True


def can_pin() -> bool:
    """Whether client and server get a core each (2+ cores, ``taskset``, not switched off)."""
    return _PINNABLE and _pinning


def no_pinning() -> None:
    """Switch pinning off for this process and the servers it starts (smoke runs, which may
    run side by side)."""
    global _pinning
    _pinning = False


def pin_self(cpu: int = CLIENT_CPU) -> bool:
    """Pin this process to ``cpu`` (as ``taskset -c cpu`` would); False when not possible."""
    if not can_pin():
        return False
    os.sched_setaffinity(0, {cpu})
    return True


def pinned(argv: list[str], cpu: int) -> list[str]:
    """``argv`` run under ``taskset -c cpu`` (unchanged when pinning is not possible)."""
    return ["taskset", "-c", str(cpu), *argv] if can_pin() else argv


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def process_run_stats(pid: int) -> tuple[int, int]:
    """(CPU ns run, context switches) of process ``pid``, summed over its threads.

    From ``/proc/PID/task/*/schedstat`` (time on the CPU, ns: exact, where ``/proc/PID/stat``
    counts clock ticks) and ``/proc/PID/task/*/status`` (voluntary + involuntary switches: a
    process that sleeps in its event loop switches once per wake-up). Threads that exit while
    they are read are skipped.
    """
    cpu_ns = switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu_ns += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return cpu_ns, switches


# -- the fake server ---------------------------------------------------------------------------


class FakeServer:
    """``sse_server.py`` in its own process on :data:`SERVER_CPU`; stopped on exit."""

    def __init__(self, cpu: int = SERVER_CPU) -> None:
        argv = [sys.executable, str(HERE / "sse_server.py"), "--metrics-page", str(METRICS_PAGE)]
        self.proc = subprocess.Popen(
            pinned(argv, cpu), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.close()
            raise RuntimeError("the fake server did not start")

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=30) as response:
            return json.loads(response.read())

    def configure(
        self,
        ttft_ms: float = 0.0,
        itl_ms: float | Sequence[float] = 0.0,
        spin: bool = True,
        *,
        spread: bool = False,
        whole: bool = False,
        writes: bool = True,
    ) -> None:
        """Set the pacing of the responses that follow (``sse_server.py``): one SSE event per
        write, first ``ttft_ms`` after the read, then every ``itl_ms`` on absolute deadlines
        (a sequence: stream ``key`` gets ``itl_ms[key % len]``; 0: one event per scheduler
        step, as fast as the server writes); ``spread``: streams' phases spread over their
        ITL; ``whole``: each response in one write instead (the parser ceiling);
        ``spin=False`` when the server shares a core (its deadlines are then ~1 ms coarse);
        ``writes=False``: no per-event write log (long throughput runs)."""
        itls = ",".join(f"{x:g}" for x in (itl_ms if isinstance(itl_ms, Sequence) else [itl_ms]))
        self._get(
            f"/_config?ttft_ms={ttft_ms}&itl_ms={itls}&spin={int(spin)}&spread={int(spread)}"
            f"&whole={int(whole)}&writes={int(writes)}"
        )

    def take_log(self) -> list[dict[str, Any]]:
        """The server's timing log since the last call (see ``sse_server.py``), cleared."""
        log: list[dict[str, Any]] = self._get("/_log")
        return log

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far."""
        return float(self._get("/_stats")["cpu_s"])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- statistics --------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile (0–1, linear interpolation as numpy); ``None`` for no value."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def dist(values: Sequence[float], digits: int = 3) -> dict[str, float | int | None]:
    """count, p50, p99, max of ``values`` (rounded to ``digits``)."""

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, digits)

    return {
        "count": len(values),
        "p50": r(pct(values, 0.5)),
        "p99": r(pct(values, 0.99)),
        "max": r(max(values) if values else None),
    }


def spread(values: Sequence[float], digits: int = 1) -> dict[str, float | None]:
    """Median, min and max of per-round figures (the spread of a same-run comparison)."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """a / b rounded, ``None`` when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


# -- machine and results -----------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """CPU model, the AVX-512/AMX flags, cores, load average, versions, date (UTC)."""
    model = "unknown"
    flags: list[str] = []
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "unknown":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = line.split(":", 1)[1].split()
    import aiohttp
    from anchors import vllm_version

    return {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": model,
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx512", "amx"))),
        "avx2": "avx2" in flags,
        "cores": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "niceness": os.nice(0),
        "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "pinned": can_pin(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "vllm": vllm_version(),
    }


def write_result(out_dir: Path, name: str, result: dict[str, Any]) -> Path:
    """Write ``out_dir/NAME.json`` (the benchmark's result, machine description added)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **result}
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return path


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


progress = _stderr


# -- one benchmark as a command ----------------------------------------------------------------

#: Where results go by default: a fresh, git-ignored run directory ``runs/bench-<UTC time>/``
#: (one per command), never a tracked file; the published figures live in docs/benchmarks.md
#: and change only through ``make bench-publish``.
RUNS_DIR = REPO / "runs"


def new_out_dir(now: datetime | None = None) -> Path:
    """``runs/bench-<UTC time>/`` for a run starting ``now`` (not created here)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return RUNS_DIR / f"bench-{stamp}"


DEFAULT_OUT = new_out_dir()


def row(
    metric: str,
    ours_value: float | None,
    anchor_value: float | None,
    target: str,
    met: bool | None,
    unit: str = "",
    ratio_value: float | None = None,
) -> dict[str, Any]:
    """One line of the results table: a figure of ours, of the anchor, their ratio, the target
    and whether it is met (``None``: no target for this line, or the anchor was unavailable)."""
    return {
        "metric": metric,
        "unit": unit,
        "ours": ours_value,
        "anchor": anchor_value,
        "ratio": ratio_value if ratio_value is not None else ratio(ours_value, anchor_value),
        "target": target,
        "met": met,
    }


def bench_main(name: str, run: Callable[[bool], dict[str, Any]]) -> None:
    """Command line of one benchmark: ``[--tiny] [--out DIR]``; pins this process to the
    client core, runs ``run(tiny)`` and writes ``DIR/NAME.json``."""
    import argparse

    parser = argparse.ArgumentParser(description=f"benchmark {name}")
    parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.tiny:
        no_pinning()
    pin_self()
    began = time.perf_counter()
    result = run(args.tiny)
    result = {
        "size": "tiny" if args.tiny else "full",
        "duration_s": round(time.perf_counter() - began, 1),
        **result,
    }
    path = write_result(args.out, name, result)
    for line in result.get("rows", []):
        progress(
            f"  {line['metric']}: ours {line['ours']} anchor {line['anchor']} "
            f"ratio {line['ratio']} target {line['target']} met {line['met']}"
        )
    progress(f"{name}: {path} ({result['duration_s']} s)")
