"""The run format: every file a run directory holds, as types, with its layout and version.

The contract between the writers (``loadgen``, ``metrics``' scraper, ``gateway``) and every
reader (``analysis``: report, validate, compare, gate). Readers import run files only from
here, never from the load generator's internals:

- :mod:`loadgen.runformat.layout`: file names and the directory tree, JSON helpers;
- :mod:`loadgen.runformat.atomic`: whole-file writes by temp file and rename; the one error a
  failed write of a run becomes (:class:`RunWriteError`) is the JSONL appender's
  (``server.net.jsonl``), which appends every stream;
- :mod:`loadgen.runformat.rows`: request record, phase row, clock offset, fault, ``case.json``,
  ``run.json``, ``manifest.json``; metric sample and scrape tick (``metrics.rows``) and
  gateway event (``gateway.events``) are defined beside their writers, which may import no
  other project package, and re-exported here;
- :mod:`loadgen.runformat.version`: :data:`FORMAT_VERSION` and the version check;
- :mod:`loadgen.runformat.opening`: :func:`open_run`, the one check every reader makes
  before it reads a run (format version, a run that ended before its plan, not a run), and
  the plan's reader;
- :mod:`loadgen.runformat.reading`: the readers of JSON and JSON-lines files as row types
  (tolerant: what is broken is reported, never raised);
- :mod:`loadgen.runformat.record_files`: a case's request records, merged over its workers'
  files and clocks; :mod:`loadgen.runformat.metric_files`: its metrics files;
- :mod:`loadgen.runformat.migrate_v0`: the one migration, from version 0;
- :mod:`loadgen.runformat.manifest`: ``manifest.json``, written last.

Field lists with units: ``docs/run-format.md``.
"""

from gateway.events import GatewayEvent, HoldRow, RoutingDecisionRow
from loadgen.runformat import migrate_v0
from loadgen.runformat.atomic import RunWriteError
from loadgen.runformat.errors import UnreadableRun
from loadgen.runformat.opening import (
    NotARunError,
    RunFileError,
    UnplannedRunError,
    open_run,
    read_plan,
)
from loadgen.runformat.rows import (
    CaseInfo,
    ClockOffsetRow,
    FaultRow,
    KvEventRow,
    Manifest,
    ManifestFile,
    PhaseRow,
    ReadRecord,
    RequestRecord,
    Reseal,
    RunInfo,
    RunStatus,
    Status,
    WorkerPhaseRow,
)
from loadgen.runformat.version import FORMAT_VERSION, FormatVersionError, run_format_version
from metrics.rows import RawScrape, SampleRow, ScrapeTick

__all__ = [
    "FORMAT_VERSION",
    "CaseInfo",
    "ClockOffsetRow",
    "FaultRow",
    "FormatVersionError",
    "GatewayEvent",
    "HoldRow",
    "KvEventRow",
    "Manifest",
    "ManifestFile",
    "NotARunError",
    "PhaseRow",
    "RawScrape",
    "ReadRecord",
    "RequestRecord",
    "Reseal",
    "RoutingDecisionRow",
    "RunFileError",
    "RunInfo",
    "RunStatus",
    "RunWriteError",
    "SampleRow",
    "ScrapeTick",
    "Status",
    "UnplannedRunError",
    "UnreadableRun",
    "WorkerPhaseRow",
    "migrate_v0",
    "open_run",
    "read_plan",
    "run_format_version",
]
