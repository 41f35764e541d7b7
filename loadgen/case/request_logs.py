"""Each replica's own record of the requests it received, kept with the case.

A case that records KV-cache events has its replicas log the id of every request they
receive (``ServerConfig.log_requests``: vLLM's ``--enable-log-requests``, one INFO line
``Received request cmpl-<id>-0: params: …`` per completion, ``<id>`` the client's
``X-Request-Id``). A replica outlives a case (a fleet run sends every policy through the same
replicas) and its log with it, so the case notes where each replica's log ends when the case
starts (:func:`mark_request_logs`) and, when it ends, copies what was appended since into the
replica's ``vllm_requests.log`` of the case directory (:meth:`RequestLogMarks.copy_into`):
the replicas' own evidence of which of them served each request, in the case's directory
(``analysis.replica_attribution`` reads it). A restarted replica appends to the same log
(``server.process.spawn_group``), so its lines after a restart are copied too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.runformat.atomic import write_bytes
from loadgen.runformat.layout import REQUEST_LOG, replica_dir


@dataclass(frozen=True)
class RequestLogMarks:
    """Where each replica's vLLM log ended when the case started.

    Attributes:
        marks: (replica index, its log file, its size in bytes then), replica 0 first; a
            replica without a log of its own (attached to a URL) has none.
    """

    marks: tuple[tuple[int, Path, int], ...]

    def copy_into(self, cdir: Path) -> None:
        """Write the bytes each replica's log gained since the mark into its
        ``vllm_requests.log`` under case directory ``cdir`` (``replica_dir``); a log that
        cannot be read any more is skipped, so that replica has no file (the analysis then
        says the replica's requests are unknown).

        Raises:
            RunWriteError: a file of the case could not be written.
        """
        for replica, log, offset in self.marks:
            try:
                with log.open("rb") as src:
                    src.seek(offset)
                    data = src.read()
            except OSError:
                continue
            dest = replica_dir(cdir, replica) / REQUEST_LOG
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_bytes(dest, data)


def mark_request_logs(logs: Sequence[Path | None]) -> RequestLogMarks:
    """The marks of ``logs`` (replica K's vLLM log at index K, ``None`` for a replica
    without one): each file's size now, 0 for one not written yet."""
    marks = []
    for replica, log in enumerate(logs):
        if log is None:
            continue
        try:
            size = log.stat().st_size
        except OSError:
            size = 0
        marks.append((replica, log, size))
    return RequestLogMarks(tuple(marks))
