"""Reading a case's request records back, merged over its record files.

A case sent by one process has ``requests.jsonl``; a case whose phases were split across
workers (``loadgen run --workers N`` / ``--ray``) has one ``requests.worker-K.jsonl`` per
worker instead, and every reader gets them merged (:func:`read_records`): each record tagged
with its ``worker``, its stamps moved onto the coordinator's clock by the offset measured for
its worker and phase (``clock_offsets.jsonl``; none on one host, whose monotonic clock every
process shares), and all of them in the order they finished. Statistics over the merged
records are pooled over every request, never averaged per worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.runformat.layout import (
    CLOCK_OFFSETS_FILE,
    REQUESTS_FILE,
    worker_request_files,
)
from loadgen.runformat.reading import JsonlFile, read_jsonl
from loadgen.runformat.rows import (
    STAMP_FIELDS,
    STAMP_LIST_FIELDS,
    ClockOffsetRow,
    ReadRecord,
)


def shift_stamps(record: ReadRecord, offset_ns: int) -> None:
    """Move every stamp of ``record`` (``STAMP_FIELDS``, ``STAMP_LIST_FIELDS``) from its
    worker's clock to the coordinator's, in place (stamp − ``offset_ns``); ``None`` stamps
    stay ``None``."""
    if not offset_ns:
        return
    for key in STAMP_FIELDS:
        value = getattr(record, key)
        if value is not None:
            setattr(record, key, value - offset_ns)
    for key in STAMP_LIST_FIELDS:
        setattr(record, key, [t - offset_ns for t in getattr(record, key)])


def _finish_order(record: ReadRecord) -> int:
    for stamp in (record.end_ns, record.sent_ns, record.scheduled_ns):
        if stamp is not None:
            return stamp
    return 0


@dataclass(frozen=True)
class RecordFiles:
    """A case's request records, merged over its record files (see the module docstring).

    Attributes:
        records: every record, worker-tagged (``worker`` is ``None`` for ``requests.jsonl``)
            and on the coordinator's clock, in the order they finished (``end_ns``).
        files: each record file read, by its name in the case directory.
        offsets: the clock offsets applied (``clock_offsets.jsonl`` rows).
        workers: how many worker files there were (0: one process wrote ``requests.jsonl``).
    """

    records: list[ReadRecord]
    files: dict[str, JsonlFile[Any]]
    offsets: list[ClockOffsetRow]
    workers: int


def read_records(cdir: Path) -> RecordFiles:
    """The merged request records of case directory ``cdir`` (see the module docstring).

    A record of worker k in phase p is shifted by the offset measured for (p, k); a worker
    and phase without one is on the coordinator's clock already (same host).
    """
    offsets_file = read_jsonl(cdir / CLOCK_OFFSETS_FILE, ClockOffsetRow)
    offset = {(o.phase, o.worker): o.offset_ns for o in offsets_file.rows}
    files: dict[str, JsonlFile[Any]] = {}
    records: list[ReadRecord] = []
    single = read_jsonl(cdir / REQUESTS_FILE, ReadRecord)
    if single.exists:
        files[REQUESTS_FILE] = single
        records += single.rows
    workers = worker_request_files(cdir)
    for worker, path in workers:
        part = read_jsonl(path, ReadRecord)
        files[path.name] = part
        for r in part.rows:
            shift_stamps(r, offset.get((r.phase, worker), 0))
            r.worker = worker
            records.append(r)
    if workers:
        records.sort(key=_finish_order)  # stable: each file's own order is kept on ties
    if offsets_file.exists:
        files[CLOCK_OFFSETS_FILE] = offsets_file
    return RecordFiles(records, files, offsets_file.rows, len(workers))
