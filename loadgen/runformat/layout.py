"""The run directory layout: the contract between the writers (loadgen, metrics, server) and
the readers (analysis, validate). One run = one directory; ``manifest.json`` is written last.
Every JSON file and JSON line is one row type of :mod:`loadgen.runformat` (named below).

    RUN/
      run.json                 format version, command, versions, wall-clock anchor, status
                               (RunInfo)
      plan.json                the resolved plan (cases, phases, checks, sizing)
      cases/NAME/
        case.json              case status, error, server facts (CaseInfo)
        server/                vllm.log, command.json, server.json (spawned servers only)
        gateway.log            the gateway's log (cases sent through the gateway)
        gateway_events.jsonl   the gateway's breaker transitions (GatewayEvent)
        routing_decisions.jsonl  the gateway's routing decisions (RoutingDecisionRow)
        gateway_holds.jsonl    a gateway delay injector's hold per request (HoldRow)
        faults.jsonl           injected faults: replica killed / restarted (FaultRow)
        requests.jsonl         one record per request (RequestRecord); with several
                               load-generator workers, one file per worker instead:
        requests.worker-K.jsonl  worker K's records, stamped on its own clock
        clock_offsets.jsonl    per phase and worker (Ray): the worker's clock offset to the
                               coordinator's, its error bound; readers subtract it
                               (ClockOffsetRow)
        phases.jsonl           phase boundaries (monotonic ns), loop-lag figures, the requested
                               concurrency; with workers, per-worker figures (PhaseRow)
        metrics/               samples.jsonl (SampleRow), scrapes.jsonl (ScrapeTick),
                               raw.jsonl.gz (metrics.store)
        kv_events.jsonl        the KV-cache events replica 0's vLLM published (KvEventRow)
        replicas/K/metrics/    a fleet case: replica K's scrapes, as metrics/ (K ≥ 1)
        replicas/K/kv_events.jsonl  replica K's KV-cache events
        vllm_requests.log      what replica 0's vLLM logged during a case that records KV
                               events: the id of each request it received
                               (``loadgen.case.request_logs``)
        replicas/K/vllm_requests.log  replica K's
        fleet.json             a fleet case: its replicas' URLs in order and its routing
      report.md, report.json   the report (``analysis.models.RunSummary``, versioned)
      report.html              the same report as one self-contained page
      plots/*.png, plots/*.svg each figure as PNG (report.md) and SVG (inlined in report.html)
      export/                  ``loadgen export``'s default output: derived, never sealed
      manifest.json            files with sizes and sha256, status — written last (Manifest)

The server's and the third-party proxy's files are named beside their writers (``server``
and ``metrics`` import no project package; ``loadgen.proxies``) and re-exported here:

      cases/NAME/server/       vllm.log, command.json, server.json (``server.workdir``);
                               replica K ≥ 1 of a case in ``server-replica-K/``
      cases/NAME/proxy/        a third-party proxy's config and logs (nginx: nginx.conf,
                               error.log, nginx.log; vllm-router: vllm-router.log)

A ``loadgen compare`` directory (and a ``loadgen gate`` directory, which adds the runs of
each side and the looks of a sequential gate):

    OUT/
      compare.md, compare.json the comparison, its decision and exit code
                               (``analysis.compare_report.CompareFile``, versioned)
      compare.html             the same comparison as one self-contained page
      plots/compare_CASE.png   and .svg
      baseline/run-K/, candidate/run-K/   a gate's runs, one run directory each
      looks.jsonl              a sequential gate's looks (``analysis.gate_sequential.Look``)

See docs/run-directory.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from loadgen.runformat.atomic import write_text

# The scraper's files and the server's, named beside their writers (``metrics`` and ``server``
# import no other project package): re-exported.
from metrics.store import METRICS_DIR as METRICS_DIR
from metrics.store import RAW_FILE as RAW_FILE
from metrics.store import SAMPLES_FILE as SAMPLES_FILE
from metrics.store import SCRAPES_FILE as SCRAPES_FILE
from server.net.json_text import dumps
from server.net.jsonl import append_lines
from server.net.urls import redact_urls_in
from server.workdir import COMMAND_FILE as COMMAND_FILE
from server.workdir import SERVER_FILE as SERVER_FILE
from server.workdir import VLLM_LOG as VLLM_LOG

RUN_FILE = "run.json"
PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
CASES_DIR = "cases"
CASE_FILE = "case.json"
REQUESTS_FILE = "requests.jsonl"
#: Records of worker K of a phase split across several (``requests.worker-0.jsonl``, …).
WORKER_REQUESTS_PREFIX = "requests.worker-"
CLOCK_OFFSETS_FILE = "clock_offsets.jsonl"
PHASES_FILE = "phases.jsonl"
SERVER_DIR = "server"
GATEWAY_LOG = "gateway.log"
GATEWAY_EVENTS_FILE = "gateway_events.jsonl"
ROUTING_DECISIONS_FILE = "routing_decisions.jsonl"
#: The gateway's delay injector's holds, one line per slowed request (``--slowdown`` only).
GATEWAY_HOLDS_FILE = "gateway_holds.jsonl"
#: A third-party proxy's config and logs (``loadgen.proxies``): nginx's config, its error log
#: and its output; vllm-router's output (nginx adds its pid file and temporary directories).
PROXY_DIR = "proxy"
NGINX_CONF = "nginx.conf"
NGINX_ERROR_LOG = "error.log"
NGINX_LOG = "nginx.log"
ROUTER_LOG = "vllm-router.log"
#: The server directory of replica K ≥ 1 of a case (replica 0's is ``server/``).
REPLICA_SERVER_DIR = "server-replica-{k}"
FAULTS_FILE = "faults.jsonl"
#: The KV-cache events of a replica (``loadgen.kvevents``), in its :func:`replica_dir`.
KV_EVENTS_FILE = "kv_events.jsonl"
#: What a replica's vLLM logged during the case (``loadgen.case.request_logs``), in its
#: :func:`replica_dir`.
REQUEST_LOG = "vllm_requests.log"
#: A fleet case's per-replica files: ``replicas/K/`` for replica K ≥ 1.
REPLICAS_DIR = "replicas"
#: A fleet case's replica URLs (replica 0 first) and routing policy.
FLEET_FILE = "fleet.json"
#: Where ``loadgen export`` writes by default: derived from the sealed files, read by no
#: reader of the run, so never sealed (``loadgen.runformat.manifest.UNSEALED_DIRS``).
EXPORT_DIR = "export"
#: The report's plots in ``plots/`` (a scenario's own plots are named by its report).
TTFT_PLOT = "ttft_by_phase.png"
TIMELINE_PLOT = "timeline_{case}.png"
LATENCY_PLOT = "latency_{case}.png"

#: A compare or gate directory (module docstring).
COMPARE_MD = "compare.md"
COMPARE_JSON = "compare.json"
COMPARE_HTML = "compare.html"
LOOKS_FILE = "looks.jsonl"
#: A gate's pairs, one line each: the blocks they ran in and, phase by phase, the turns taken.
PAIRS_FILE = "pairs.jsonl"
#: A gate's two sides, each a directory of runs ``run-K`` (K from 1).
GATE_SIDES = ("baseline", "candidate")


def case_dir(run_dir: Path, case: str) -> Path:
    """``RUN/cases/CASE``."""
    return run_dir / CASES_DIR / case


def replica_dir(cdir: Path, replica: int) -> Path:
    """Where replica ``replica``'s scrapes of a fleet case go: the case directory itself for
    replica 0, ``replicas/K/`` under it for replica K ≥ 1."""
    return cdir if replica == 0 else cdir / REPLICAS_DIR / str(replica)


#: The files that make a directory a run directory: any one of them (a run killed early may
#: have only ``run.json``; one whose ``run.json`` was lost still has its plan or manifest).
RUN_MARKERS = (RUN_FILE, PLAN_FILE, MANIFEST_FILE)


def enclosing_run(path: Path) -> Path | None:
    """The run directory ``path`` is or lies in (symlinks resolved): the nearest of it and the
    directories above it that holds one of ``RUN_MARKERS``; ``None`` when there is none."""
    resolved = path.resolve()
    for candidate in (resolved, *resolved.parents):
        if any((candidate / name).is_file() for name in RUN_MARKERS):
            return candidate
    return None


def gate_run_dir(gate_dir: Path, side: str, index: int) -> Path:
    """Run ``index`` (1-based) of ``side`` (one of ``GATE_SIDES``) in a gate directory."""
    return gate_dir / side / f"run-{index}"


def worker_requests_file(worker: int) -> str:
    """The record file of load-generator worker ``worker`` in a case directory."""
    return f"{WORKER_REQUESTS_PREFIX}{worker}.jsonl"


def worker_request_files(cdir: Path) -> list[tuple[int, Path]]:
    """(worker index, path) of every worker record file in case directory ``cdir``, by index."""
    found = []
    for path in cdir.glob(f"{WORKER_REQUESTS_PREFIX}*.jsonl"):
        index = path.name[len(WORKER_REQUESTS_PREFIX) : -len(".jsonl")]
        if index.isdigit():
            found.append((int(index), path))
    return sorted(found)


def write_json(path: Path, obj: object) -> None:
    """Write JSON atomically (temp file, fsync, rename: :mod:`loadgen.runformat.atomic`), so a
    reader never sees half a file; a row type (a msgspec Struct) is written with its fields
    in order.

    Raises:
        RunWriteError: the file could not be written (it is as it was, no temporary left).
        server.net.json_text.NonFiniteValue: ``obj`` holds a NaN or ±Infinity, which JSON
            cannot hold (nothing is written).
    """
    if isinstance(obj, msgspec.Struct):
        obj = msgspec.to_builtins(obj, enc_hook=str)
    # No URL password reaches a run file (run.json, plan.json, case.json, manifest.json).
    text = redact_urls_in(dumps(obj, path.name, indent=2, sort_keys=False, default=str))
    write_text(path, text + "\n")


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object file.

    Raises:
        FileNotFoundError: missing file.
        ValueError: not a JSON object.
    """
    obj = json.loads(path.read_text())
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return obj


def append_jsonl(path: Path, row: msgspec.Struct) -> None:
    """Append one row (a row type of :mod:`loadgen.runformat`) as a JSON line and flush it
    (``server.net.jsonl.append_lines``), URL passwords masked.

    Raises:
        RunWriteError: the append failed.
    """
    append_lines(path, redact_urls_in(msgspec.json.encode(row).decode()).encode() + b"\n")
