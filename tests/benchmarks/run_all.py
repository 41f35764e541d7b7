"""The one benchmark command: runs the six benchmarks, writes their JSON and ``RESULTS.md``.

Each benchmark runs in a fresh process (``bench_*.py --out DIR``), one after the other; one
that fails is recorded as failed and the others still run. Then ``RESULTS.md`` is generated
from the JSON files: the machine (CPU model, AVX-512/AMX flags, cores, load), the date, one
table of every benchmark's figures (ours, anchor, ratio, target, met) and per-benchmark details.
Everything goes into one git-ignored run directory, ``runs/bench-<UTC time>/`` unless ``--out``
names another, and the last line printed says where; nothing tracked is rewritten (the
published figures in docs/benchmarks.md change only through ``publish.py``).
``make bench`` runs this under the machine lock; ``--tiny`` runs seconds-long sizes (what the
test suite checks).
Run: ``python tests/benchmarks/run_all.py [--tiny] [--out DIR] [--results FILE] [--only a,b]``;
``--render-only`` rewrites ``RESULTS.md`` from a run's files (``run.json`` and the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness as h
from report import render

#: (JSON name, script), in the order docs/benchmarks.md lists them.
BENCHMARKS = (
    ("client_throughput", "bench_client_throughput.py"),
    ("client_timing", "bench_client_timing.py"),
    ("open_loop", "bench_open_loop.py"),
    ("scraper", "bench_scraper_loop_lag.py"),
    ("gateway", "bench_gateway.py"),
    ("phase_memory", "bench_phase_memory.py"),
)


def run_one(name: str, script: str, out_dir: Path, tiny: bool) -> dict[str, Any]:
    """Run one benchmark's script; its JSON, or a failure record if it wrote none."""
    path = out_dir / f"{name}.json"
    path.unlink(missing_ok=True)
    argv = [sys.executable, str(h.HERE / script), "--out", str(out_dir)]
    if tiny:
        argv.append("--tiny")
    h.progress(f"benchmark {name} ...")
    began = time.perf_counter()
    proc = subprocess.run(argv, stderr=subprocess.PIPE, text=True, cwd=h.REPO)
    sys.stderr.write(proc.stderr)
    if proc.returncode == 0 and path.exists():
        result: dict[str, Any] = json.loads(path.read_text())
        return result
    failure = {
        "benchmark": name,
        "failed": True,
        "error": proc.stderr[-3000:],
        "duration_s": round(time.perf_counter() - began, 1),
        "rows": [],
    }
    path.write_text(json.dumps(failure, indent=1) + "\n")
    return failure


def load_run(out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's benchmark JSON files (in :data:`BENCHMARKS` order, those present) and its
    ``run.json``.

    Raises:
        FileNotFoundError: ``out_dir`` has no ``run.json``.
    """
    run: dict[str, Any] = json.loads((out_dir / "run.json").read_text())
    results = [
        json.loads((out_dir / f"{name}.json").read_text())
        for name, _ in BENCHMARKS
        if (out_dir / f"{name}.json").exists()
    ]
    return results, run


def render_only(out_dir: Path, results_md: Path) -> int:
    """Rewrite ``results_md`` from the JSON files of a run (its own run.json says the rest)."""
    results, run = load_run(out_dir)
    results_md.write_text(render_run(results, run), encoding="utf-8")
    return 0


def render_run(results: list[dict[str, Any]], run: dict[str, Any]) -> str:
    """``RESULTS.md`` for a run (and the reruns listed in its ``run.json``)."""
    return render(
        results, run["machine"], run["total_s"], run["tiny"], run["lock_held"],
        run.get("reruns", []),
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--results`` defaults to ``RESULTS.md`` inside ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument(
        "--out", type=Path, default=h.DEFAULT_OUT, help="run directory (runs/bench-<UTC time>)"
    )
    parser.add_argument("--results", type=Path, help="RESULTS.md to write (default: in --out)")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="only rewrite RESULTS.md from the JSON files in --out (machine: the first file's)",
    )
    args = parser.parse_args(argv)
    if args.results is None:
        args.results = args.out / "RESULTS.md"
    return args


def main() -> int:
    args = parse_args()
    if args.render_only:
        return render_only(args.out, args.results)
    chosen = set(args.only.split(",")) if args.only else None
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tiny:
        h.no_pinning()
    machine = h.machine()  # before anything runs: the load average says how busy it was
    began = time.perf_counter()
    results = [
        run_one(name, script, args.out, args.tiny)
        for name, script in BENCHMARKS
        if chosen is None or name in chosen
    ]
    total_s = round(time.perf_counter() - began, 1)
    lock = os.environ.get("BENCH_LOCK_HELD") == "1"
    run_file = args.out / "run.json"
    run = {"machine": machine, "total_s": total_s, "tiny": args.tiny, "lock_held": lock}
    if chosen is not None and run_file.exists():
        # A rerun of some benchmarks: the full run's header stays, the rerun is listed, and
        # every benchmark's JSON present is rendered (each says its own date and load).
        run = json.loads(run_file.read_text())
        run.setdefault("reruns", []).append(
            {"benchmarks": sorted(chosen), "date_utc": machine["date_utc"],
             "load_average_1m": machine["load_average_1m"], "lock_held": lock}
        )  # fmt: skip
        results = [
            json.loads((args.out / f"{name}.json").read_text())
            for name, _ in BENCHMARKS
            if (args.out / f"{name}.json").exists()
        ]
    run_file.write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    args.results.write_text(render_run(results, run), encoding="utf-8")
    h.progress(f"all benchmarks: {total_s} s")
    # The last line says where everything went (stdout, for scripts and `make bench`).
    print(f"benchmark results: {args.out}/ (RESULTS.md: {args.results}); publish them with "
          f"`make bench-publish RUN={args.out}`")  # fmt: skip
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
