"""How a case ends: the exception that ended it becomes its status and error, and
``case.json`` says so.

The case's status is ``failed`` only when its infrastructure failed (server, scraper, relay,
a worker); failed requests are data, counted in ``failed_requests`` and in the report. A
server that died fails the case and tells the run to start or attach anew for the next one;
a run file that cannot be written fails the case and ends the run; Ctrl-C or SIGTERM marks
it ``interrupted`` and ends the run; any other exception fails the case and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.runformat import CaseInfo, RunStatus, RunWriteError
from loadgen.runformat.atomic import write_error_under
from loadgen.runformat.layout import CASE_FILE, write_json
from loadgen.server_watch import ServerGone
from scenarios.plan import CaseSpec
from server.manager import RunningServer
from server.net.errors import describe_exception


@dataclass
class CaseOutcome:
    """How a case went: its status and error, and how many requests it recorded (all, and
    those that failed)."""

    name: str
    status: RunStatus = "ok"
    error: str | None = None
    failed_requests: int = 0
    requests: int = 0
    #: The case failed because its server died or stopped answering.
    server_gone: bool = False


INTERRUPTED = "interrupted (Ctrl-C or SIGTERM)"


async def ended_to_the_end(outcome: CaseOutcome, ending: Awaitable[None]) -> None:
    """Await ``ending`` (stopping what the case started) to its end even when the run is
    interrupted meanwhile: a signal then must neither leave the scraper or a relay running
    nor skip the case's final status. Whatever stopped it is recorded in ``outcome`` (a case
    still ``ok`` becomes ``interrupted``, or ``failed`` with the error) and raised after.

    Raises:
        asyncio.CancelledError: the user interrupted the run while the case was ending.
        Exception: whatever ``ending`` raised.
    """
    task = asyncio.ensure_future(ending)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait([task])  # unlike ``await task``, cancelling this leaves it running
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None or task.cancelled():
        if outcome.status == "ok":
            outcome.status, outcome.error = "interrupted", f"{INTERRUPTED} while the case ended"
        raise cancelled or asyncio.CancelledError()
    failure = task.exception()
    if failure is not None:
        if outcome.status == "ok":
            outcome.status, outcome.error = "failed", describe_exception(failure)
        raise failure


@contextlib.contextmanager
def recorded_failures(outcome: CaseOutcome, cdir: Path) -> Iterator[None]:
    """Record the exception that ends the block in ``outcome``: a failure of the case is kept
    there (the run goes on); a run file that cannot be written and Ctrl-C are kept there too
    and propagate (the run ends).

    Raises:
        RunWriteError: a file of the run (``cdir`` or another) could not be written.
        asyncio.CancelledError: the user interrupted the run.
    """
    try:
        yield
    except ServerGone as exc:
        outcome.status, outcome.error, outcome.server_gone = "failed", str(exc), True
    except RunWriteError as exc:  # the run cannot go on: recorded, then the run ends
        outcome.status, outcome.error = "failed", str(exc)
        raise
    except OSError as exc:  # the gateway's log, say: a file of the case that cannot be written
        written = write_error_under(exc, cdir)
        outcome.status = "failed"
        outcome.error = str(written) if written else describe_exception(exc)
        if written is not None:
            raise written from exc
    except Exception as exc:  # recorded as the case's failure; the run goes on
        outcome.status = "failed"
        outcome.error = describe_exception(exc)
    except asyncio.CancelledError:
        outcome.status, outcome.error = "interrupted", INTERRUPTED
        raise


def check_relays_ran_through(relays: Iterable[tuple[str, Callable[[], int | None]]]) -> None:
    """Fail the case when a process its requests went through (the gateway, a proxy), given
    as ``(name, exit code or None)``, ended before the case did: requests through it failed
    for the relay's sake, not the server's.

    Raises:
        RuntimeError: one ended (its name and exit code, negative for a signal).
    """
    for name, exit_code in relays:
        code = exit_code()
        if code is not None:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise RuntimeError(
                f"{name} ended during the case ({how}): requests through it failed because of "
                "it, not the server"
            )


def write_case_info(
    cdir: Path,
    case: CaseSpec,
    server: RunningServer,
    outcome: CaseOutcome | None,
    client: list[dict[str, object] | None] | None = None,
    pending: BaseException | None = None,
) -> None:
    """Write ``case.json``: ``running`` without an ``outcome``, else how the case ended and
    how its sending threads were placed (``client``).

    Raises:
        RunWriteError: it could not be written, and no exception (``pending``) is already
            ending the case (else that one, maybe the first write error, is reported).
    """
    if outcome is None:
        info = CaseInfo(case=case.model_dump(mode="json"), server=server.describe(),
                        status="running")  # fmt: skip
    else:
        info = CaseInfo(
            case=case.model_dump(mode="json"),
            server=server.describe(),
            status=outcome.status,
            error=outcome.error,
            requests=outcome.requests,
            failed_requests=outcome.failed_requests,
            client=client or [],
        )
    try:
        write_json(cdir / CASE_FILE, info)
    except RunWriteError:
        if pending is None:
            raise
