"""Reading a run's JSON and JSON-lines files back as their row types: the readers beside the
writers (:mod:`loadgen.runformat.layout`), used by every reader of a run (``analysis``).

Every JSON-lines file is read the same way (:func:`read_jsonl`): a last line cut short by a
crash (no newline, not valid JSON) is skipped and reported as a torn tail; a complete line that
is not a JSON object, or not a well-typed row of its file (its row type, checked strictly by
msgspec), is skipped and reported by line number with the reason; everything else is kept.

A JSON file (``run.json``, ``case.json``) that is unreadable, not an object or mistyped reads
as its type's defaults with a problem saying so (:func:`read_json_file`), never an exception:
what to do with a broken file is the reader's decision (``analysis.integrity``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from gateway.events import GatewayEvent
from loadgen.runformat.rows import (
    CaseInfo,
    ClockOffsetRow,
    FaultRow,
    PhaseRow,
    ReadRecord,
    RunInfo,
)
from metrics.rows import SampleRow, ScrapeTick

Row = TypeVar("Row", bound=msgspec.Struct)

#: Row type → the name a problem calls its rows by (``not well-typed record rows``).
ROW_KINDS: dict[type[msgspec.Struct], str] = {
    ReadRecord: "record", PhaseRow: "phase", SampleRow: "sample", ScrapeTick: "scrape",
    ClockOffsetRow: "clock offset", FaultRow: "fault", GatewayEvent: "gateway event",
    CaseInfo: "case", RunInfo: "run",
}  # fmt: skip


def validation_reason(exc: msgspec.ValidationError) -> str:
    """msgspec's message with the field first: ``Expected `int`, got `str` - at `$.t_ns``` →
    ``t_ns: Expected `int`, got `str```; ``Object missing required field `value``` →
    ``value: missing (a required field)``."""
    text = str(exc)
    what, sep, where = text.rpartition(" - at `$")
    where = where.rstrip("`").lstrip(".") if sep else ""
    what = what if sep else text
    missing = what.removeprefix("Object missing required field `")
    if missing != what:
        field_name = missing.rstrip("`")
        return f"{where + '.' if where else ''}{field_name}: missing (a required field)"
    return f"{where or 'row'}: {what}"


@dataclass(frozen=True)
class JsonlFile(Generic[Row]):
    """What a JSON-lines file held.

    Attributes:
        rows: its readable, well-typed lines as rows of its type, in file order.
        exists: the file was there.
        torn_tail: its last line was cut short (no newline and not valid JSON): skipped.
        bad_lines: 1-based numbers of complete lines that are not JSON objects: skipped.
        mistyped: (line number, why) of JSON objects that are not well-typed rows of the
            file's type: skipped.
        kind: the name of the row type the lines were read as (``record``, ``phase``, …).
        raw: the JSON objects of the well-typed lines, as read (before the migration of a
            version-0 run upgraded them): what :func:`loadgen.runformat.migrate_v0` inspects.
    """

    rows: list[Row]
    exists: bool = True
    torn_tail: bool = False
    bad_lines: tuple[int, ...] = ()
    mistyped: tuple[tuple[int, str], ...] = ()
    kind: str | None = None
    raw: list[dict[str, Any]] = field(default_factory=list)

    def problems(self, name: str) -> list[str]:
        """Human-readable findings about this file (empty when it read cleanly)."""
        out = []
        if self.torn_tail:
            out.append(
                f"the last line of {name} is cut short (a crash while writing it); "
                "the lines before it are intact"
            )
        if self.bad_lines:
            lines = ", ".join(str(n) for n in self.bad_lines[:10])
            out.append(f"{name}: line(s) {lines} are not valid JSON objects and were skipped")
        if self.mistyped:
            lines = ", ".join(f"{n} ({why})" for n, why in self.mistyped[:5])
            more = f" and {len(self.mistyped) - 5} more" if len(self.mistyped) > 5 else ""
            out.append(f"{name}: line(s) {lines}{more} are not well-typed {self.kind} rows "
                       "and were skipped")  # fmt: skip
        return out


#: How a version-0 row is upgraded before it is typed: (object, its 0-based index) → object.
Upgrade = Callable[[dict[str, Any], int], dict[str, Any]]


def read_jsonl(path: Path, row_type: type[Row], upgrade: Upgrade | None = None) -> JsonlFile[Row]:
    """Read a JSON-lines file of ``row_type`` rows the tolerant way described in the module
    docstring; ``upgrade`` (a version-0 migration) rewrites each object before it is typed.

    A missing file gives an empty :class:`JsonlFile` with ``exists=False``.
    """
    kind = ROW_KINDS.get(row_type, row_type.__name__)
    if not path.exists():
        return JsonlFile([], exists=False, kind=kind)
    rows: list[Row] = []
    raw: list[dict[str, Any]] = []
    bad: list[int] = []
    mistyped: list[tuple[int, str]] = []
    torn = False
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if line.endswith("\n"):
                    bad.append(lineno)
                else:
                    torn = True  # only the last line can lack its newline
                continue
            if not isinstance(obj, dict):
                bad.append(lineno)
                continue
            typed = upgrade(obj, len(raw) + len(mistyped)) if upgrade is not None else obj
            try:
                rows.append(msgspec.convert(typed, row_type, strict=True))
            except msgspec.ValidationError as exc:
                mistyped.append((lineno, validation_reason(exc)))
            else:
                raw.append(obj)
    return JsonlFile(rows, True, torn, tuple(bad), tuple(mistyped), kind, raw)


@dataclass(frozen=True)
class JsonFile(Generic[Row]):
    """What a JSON file held: ``data`` (the type's defaults when missing or unusable) and,
    when it was there but unusable, ``problem`` saying why."""

    data: Row
    exists: bool
    problem: str | None = None


def read_json_object(path: Path) -> tuple[dict[str, Any] | None, bool, str | None]:
    """(the JSON object, the file exists, why it is unusable) of a JSON object file; never
    raises for a broken file: an empty, unreadable or non-object file gives ``None`` and a
    problem naming the file."""
    if not path.exists():
        return None, False, None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, True, f"{path.name} cannot be read ({exc}); read as empty"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        why = "is empty" if not text.strip() else f"is not valid JSON ({exc})"
        return None, True, f"{path.name} {why}; read as empty"
    if not isinstance(obj, dict):
        return None, True, (f"{path.name} holds a {type(obj).__name__}, not a JSON "
                            "object; read as empty")  # fmt: skip
    return obj, True, None


def read_json_file(path: Path, row_type: type[Row]) -> JsonFile[Row]:
    """Read a JSON object file as a ``row_type`` (``RunInfo``, ``CaseInfo``); it must be well
    typed. Never raises for a broken file: an empty, unreadable, non-object or mistyped file
    gives the type's defaults and a ``problem`` naming the file."""
    obj, exists, problem = read_json_object(path)
    if obj is None:
        return JsonFile(row_type(), exists, problem)
    try:
        return JsonFile(msgspec.convert(obj, row_type, strict=True), True)
    except msgspec.ValidationError as exc:
        why = validation_reason(exc)
        return JsonFile(row_type(), True, f"{path.name} is not well typed ({why}); read as empty")
