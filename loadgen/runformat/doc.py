"""``docs/run-format.md``, generated from the row types: ``python -m loadgen.runformat.doc``.

Each row kind's table lists its fields in file order with their JSON types and the meaning
its type's docstring gives them (``Attributes:``); a test keeps the page equal to what this
module writes, so the page cannot drift from the types.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import msgspec

from gateway.events import GatewayEvent, HoldRow
from loadgen.runformat import migrate_v0, rows
from loadgen.runformat.layout import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    COMPARE_JSON,
    FAULTS_FILE,
    GATEWAY_EVENTS_FILE,
    GATEWAY_HOLDS_FILE,
    KV_EVENTS_FILE,
    LOOKS_FILE,
    MANIFEST_FILE,
    PHASES_FILE,
    RAW_FILE,
    REPORT_JSON,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
)
from loadgen.runformat.version import FORMAT_VERSION
from metrics.rows import RawScrape, SampleRow, ScrapeTick

#: The page's path in the repository.
PAGE = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"

#: (file, row type) in the order the page lists them.
KINDS: list[tuple[str, type[msgspec.Struct]]] = [
    (RUN_FILE, rows.RunInfo),
    (f"cases/NAME/{CASE_FILE}", rows.CaseInfo),
    (f"cases/NAME/{REQUESTS_FILE} (and requests.worker-K.jsonl)", rows.RequestRecord),
    (f"cases/NAME/{PHASES_FILE}", rows.PhaseRow),
    (f"cases/NAME/{PHASES_FILE}: each of a row's `workers`", rows.WorkerPhaseRow),
    (f"cases/NAME/{CLOCK_OFFSETS_FILE}", rows.ClockOffsetRow),
    (f"cases/NAME/{FAULTS_FILE}", rows.FaultRow),
    (f"cases/NAME/{GATEWAY_EVENTS_FILE}", GatewayEvent),
    (f"cases/NAME/{GATEWAY_HOLDS_FILE}", HoldRow),
    (f"cases/NAME/{KV_EVENTS_FILE} (and replicas/K/{KV_EVENTS_FILE})", rows.KvEventRow),
    (f"cases/NAME/{SAMPLES_FILE}", SampleRow),
    (f"cases/NAME/{SCRAPES_FILE}", ScrapeTick),
    (f"cases/NAME/{RAW_FILE}", RawScrape),
    (MANIFEST_FILE, rows.Manifest),
    (f"{MANIFEST_FILE}: each of its `files`", rows.ManifestFile),
    (f"{MANIFEST_FILE}: each of its `resealed`", rows.Reseal),
]

#: (file, its type, its reader) of the files the analysis writes, as the page lists them.
_OUTPUTS = [
    (REPORT_JSON, "analysis.models.RunSummary", "analysis.report_file.read_report"),
    (f"{COMPARE_JSON} (compare and gate directories)", "analysis.compare_report.CompareFile",
     "analysis.compare_report.read_compare_file"),
    (f"{LOOKS_FILE} (a sequential gate), one a line", "analysis.gate_sequential.Look", None),
]  # fmt: skip
_OUTPUT_TABLE = "\n".join(
    ["| file | type (pydantic) | reader |", "|---|---|---|"]
    + [f"| `{f}` | `{t}` | {f'`{r}`' if r else ''} |" for f, t, r in _OUTPUTS]
)

_HEAD = f"""\
# Run format

Every file a run directory holds is one row type of `loadgen.runformat` (JSON files: one
object; JSON-lines files: one object per line). The writers (the load generator, the scraper,
the gateway) and every reader (`loadgen report`, `validate`, `export`, `compare`, `gate`) use
the same types, and the readers live beside the writers in `loadgen/runformat/`; readers
check each row strictly (an integer is a JSON integer, a status one of the listed values) and
skip and report a row that is not well typed. Stamps (`*_ns`) are integer
nanoseconds of the monotonic clock (one clock for every process of a Linux host);
`run.json`'s `clock` pairs it with the wall clock once per run. Durations are in the unit their
name ends with (`_s` seconds, `_ms` milliseconds); token counts are tokens, `bytes` bytes.

This page is generated from the types (`python -m loadgen.runformat.doc`); a test keeps it
equal to them.

## Format version

`run.json` records `format_version`; this loadgen writes version **{FORMAT_VERSION}**. Every reader
(`loadgen report`, `validate`, `export`, `compare`, `gate`) makes the same check first, through
one function (`loadgen.runformat.open_run`), and says the same thing about the same directory
in one line:

- version {FORMAT_VERSION} is read as it is;
- version 0, every run written before the version was recorded (no `format_version`), is read
  through the one migration, `loadgen.runformat.migrate_v0`, which upgrades its rows as they
  are read and never rewrites the files (a report of such a run says "Run format: version 0");
- any other version is refused with one line naming both versions (`report`, `validate` and
  `export` exit 2; `compare` and `gate` exit 2, "could not compare");
- a run that ended before its plan was made (`run.json` says failed or interrupted, no
  `plan.json`, no records: its server could not be started or reached) holds nothing to read:
  `report` and `export` say there is nothing to report or export (exit 1), `validate` calls it
  valid and needing attention (exit 4), `compare` cannot compare it (exit 2);
- a directory without `plan.json` that is not such a run is no run directory (exit 2; for
  `validate`, invalid).

What the migration of version 0 does:

{{MIGRATION}}

A change to any row type that a reader of the previous version cannot read raises
`FORMAT_VERSION` and adds the migration from the previous version (or states that such runs
are refused).

## The files the analysis writes

They carry their own `format_version` (1), each read back by one reader that checks it first
and refuses another version in one line; a file written before it was recorded has none and
is version 1, the same shape:

{_OUTPUT_TABLE}

`{REPORT_JSON}` is rebuilt by `loadgen report RUN` in the current version from the run's own
files.

## Row kinds
"""


def _type_name(tp: Any) -> str:
    """A field's type as JSON sees it (``int``, ``string``, ``[int]``, ``"ok" | "error"``…)."""
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(f'"{v}"' for v in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"[{_type_name(typing.get_args(tp)[0])}]"
    if origin is dict:
        key, value = typing.get_args(tp)
        return f"{{{_type_name(key)}: {_type_name(value)}}}"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp.__name__
    names = {int: "int", float: "number", str: "string", bool: "bool"}
    return names.get(tp, "any")


def _descriptions(cls: type) -> dict[str, str]:
    """field → its description in the ``Attributes:`` section of ``cls``' docstring (a line
    ``a / b: text`` describes both; continuation lines are indented further)."""
    doc = cls.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    out: dict[str, str] = {}
    current: list[str] = []
    for line in doc.split("Attributes:", 1)[1].splitlines():
        m = re.match(r"^\s{8}([\w /`]+?):\s(.*)$", line)
        if m:
            current = [n.strip(" `") for n in m.group(1).split("/")]
            for name in current:
                out[name] = m.group(2).strip()
        elif line.strip() and current:
            for name in current:
                out[name] += " " + line.strip()
    return out


def _table(cls: type[msgspec.Struct]) -> list[str]:
    hints = typing.get_type_hints(cls)
    about = _descriptions(cls)
    summary = " ".join((cls.__doc__ or "").strip().split("\n\n", 1)[0].split())
    lines = [summary, "", "| field | type | meaning |", "|---|---|---|"]
    for attr, encoded in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True):
        text = about.get(attr, "").replace("|", "\\|")
        lines.append(f"| `{encoded}` | {_type_name(hints[attr])} | {text} |")
    return lines


def _markdown(text: str) -> str:
    """Docstring markup as Markdown: ````x```` → ```x```, ``:func:`x``` → ```x```."""
    return re.sub(r":\w+:`", "`", text.replace("``", "`"))


def render() -> str:
    """The whole page."""
    migration = (migrate_v0.__doc__ or "").split("\n\n", 2)[2].strip()
    out = [_HEAD.replace("{MIGRATION}", migration)]
    for where, cls in KINDS:
        out += [f"### `{where}`: {cls.__name__}", "", *_table(cls), ""]
    return _markdown("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(render())
    sys.stdout.write(f"wrote {PAGE}\n")
