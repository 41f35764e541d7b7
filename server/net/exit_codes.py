"""Every command's exit codes and what each means, in one place.

0, 1 and 2 mean the same everywhere: success, failure (of the command, or of what it
checked), and a usage error (bad flags or input, refused before anything starts; click's
own usage errors exit 2 as well). 3 and 4 mean something per command, so each command has
its own set: ``run --strict`` exits 3 on a failed check, ``compare`` and ``gate`` exit 3 when
undecided, ``validate`` exits 4 for a valid run that needs attention, ``gate`` exits 4 when
one of its runs did not end ok.

docs/commands.md's exit-code table is written from :data:`COMMANDS`
(``python -m server.net.exit_codes``), and a test keeps it so; a test also finds no exit code
written as a number anywhere else.
"""

from __future__ import annotations

import re
import sys
import textwrap
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """An exit code with what it means (the base of each command's set; members are
    ``NAME = code, "meaning"``)."""

    meaning: str

    def __new__(cls, code: int, meaning: str = "") -> ExitCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        return member


class RunExit(ExitCode):
    """``loadgen run``."""

    OK = 0, "the run ended ok and its report was built"
    FAILED = (
        1,
        "the run failed or was interrupted, a file of it could not be written, or its report "
        "could not be built",
    )
    USAGE = 2, "bad flags or input, refused before any server starts"
    CHECK_FAILED = 3, "with `--strict`: a check of the report is FAIL"


class ReportExit(ExitCode):
    """``loadgen report``."""

    OK = 0, "the report was rebuilt and the run re-sealed"
    REFUSED = (
        1,
        "refused or failed: the run is broken, its files differ from its manifest (without "
        "`--reseal`), it ended before its plan was made, or a file could not be written",
    )
    USAGE = 2, "bad flags, not a run directory, or a run format this loadgen cannot read"


class ValidateExit(ExitCode):
    """``loadgen validate`` (docs/run-integrity.md)."""

    VALID = 0, "valid: a clean, complete run (warnings, if any, are figures that need care)"
    INVALID = (
        1,
        "invalid: a problem of the integrity rule, no manifest, or `report.json` missing, "
        "non-finite or disagreeing with the records (`report` and `compare` refuse such a "
        "run); with `--strict` also any warning",
    )
    USAGE = (
        2,
        "usage error, a directory that is no run, or a run format version this loadgen cannot read",
    )
    ATTENTION = (
        4,
        "valid, but needs attention: the run's or a case's status is not `ok` (failed, "
        "interrupted, running), a case of such a run never started, a phase is incomplete "
        "(interrupted, or rebuilt from its records), a request record has status "
        "`interrupted`, the run was resealed, or the run ended before its plan was made",
    )


class CompareExit(ExitCode):
    """``loadgen compare`` (decided from the key metrics, ``analysis.gate_decision``)."""

    NO_REGRESSION = 0, "no regression: every key metric and verdict is decided, none regressed"
    REGRESSION = (
        1,
        "a key metric or a verdict regressed (or a file of the comparison could not be "
        "written: its one line says which)",
    )
    CANNOT_COMPARE = (
        2,
        "usage error, runs whose workloads differ or that did not complete (status not ok, a "
        "case not ok, no manifest or sealed without one, an incomplete phase; "
        "`--allow-incomplete` compares them anyway), one run given on both sides (or twice on "
        "one), or runs that cannot be compared at all (one line says why)",
    )
    UNDECIDED = (
        3,
        "inconclusive: no key metric regressed, but one is inconclusive or missing (each named "
        "with the pairs it needs; key metrics: the gate file's [key_metrics] for the scenario "
        "and every verdict; `--strict`: every gated metric)",
    )


class GateExit(ExitCode):
    """``loadgen gate``: ``compare``'s codes after its runs, and 4."""

    NO_REGRESSION = CompareExit.NO_REGRESSION, CompareExit.NO_REGRESSION.meaning
    REGRESSION = CompareExit.REGRESSION, CompareExit.REGRESSION.meaning
    CANNOT_COMPARE = CompareExit.CANNOT_COMPARE, CompareExit.CANNOT_COMPARE.meaning
    UNDECIDED = CompareExit.UNDECIDED, CompareExit.UNDECIDED.meaning
    RUN_NOT_OK = 4, "a run of either side did not end ok (failed or interrupted): the gate stops"
    SELF_TEST_WRONG = (
        5,
        "--self-test: a gate was not decided as expected (the A/A gate not NO REGRESSION, or "
        "the planted slowdown not a REGRESSION naming TTFT; self_test.md says which); "
        "with --self-test, 0 means both were",
    )


class ExportExit(ExitCode):
    """``loadgen export``."""

    OK = 0, "the records were written"
    REFUSED = (
        1,
        "refused (a broken run), the run ended before its plan was made, or a file could not "
        "be written",
    )
    USAGE = (
        2,
        "bad flags, not a run directory, a run format this loadgen cannot read, a file of the "
        "run that cannot be read, a format's package missing",
    )


class TraceExit(ExitCode):
    """``loadgen trace stats``."""

    OK = 0, "the statistics were printed (and plotted)"
    WRITE_FAILED = 1, "the plot could not be written (one line names it and why)"
    BAD_INPUT = (
        2,
        "bad flags, a bad trace line (named with its line number) or a refused --plot path; "
        "nothing computed",
    )


class ServerExit(ExitCode):
    """``loadgen server start | status | stop``."""

    OK = 0, "done"
    FAILED = 1, "the server did not start, or a server was not fully stopped"
    USAGE = 2, "bad flags"


class GatewayExit(ExitCode):
    """``loadgen gateway`` (and ``python -m gateway.cli``)."""

    STOPPED = 0, "stopped (Ctrl-C or SIGTERM)"
    CANNOT_RUN = 1, "cannot run: the port is taken, the events file cannot be created, …"
    USAGE = 2, "bad flags or configuration"
    ABORTED = 130, "aborted by click (Ctrl-C at a prompt)"


class OpenRunExit(ExitCode):
    """What ``report`` and ``export`` exit with when the one check before every reader
    (``loadgen.cli.opening``) finds a run they cannot read; their tables say the same."""

    CANNOT_READ = 2, "another run format version, or not a run directory (a usage error)"
    NOTHING_IN_IT = 1, "the run ended before its plan was made: complete, and holds nothing"


class OutputExit(ExitCode):
    """What every command that writes a path exits with when the one check of output paths
    (``loadgen.cli.output_paths``) refuses it, or a write fails after it; each command's own
    set says the same under its 1 and 2."""

    WRITE_FAILED = 1, "a file could not be written (one line names it and the OS error)"
    BAD_PATH = 2, "an output path refused before any work (inside a run, unwritable, …)"


class ScraperExit(ExitCode):
    """The scraper's child process (``metrics.scraper``): no command, its parent reads it."""

    STOPPED = 0, "stopped by its event, or its parent ended"
    WRITE_FAILED = 1, "a file of `metrics/` could not be written (its one line for the parent)"


#: Every command's set, in the order docs/commands.md lists them.
COMMANDS: dict[str, type[ExitCode]] = {
    "run": RunExit,
    "report": ReportExit,
    "validate": ValidateExit,
    "compare": CompareExit,
    "gate": GateExit,
    "export": ExportExit,
    "trace stats": TraceExit,
    "server": ServerExit,
    "gateway": GatewayExit,
}


def code_lines(codes: type[ExitCode], width: int = 88) -> str:
    """The codes as a help text's lines, ``"  4  valid, but …"``, wrapped at ``width``
    columns (click keeps them as they are after a ``\\b`` line)."""
    return "\n".join(
        textwrap.fill(
            c.meaning.replace("`", ""), width, initial_indent=f"  {int(c)}  ",
            subsequent_indent="     ",
        )
        for c in codes
    )  # fmt: skip


def render_table() -> str:
    """docs/commands.md's exit-code table (Markdown), one row per command and code."""
    rows = ["| command | exit code | meaning |", "|---|---|---|"]
    for command, codes in COMMANDS.items():
        rows += [f"| `loadgen {command}` | {int(c)} | {c.meaning} |" for c in codes]
    return "\n".join(rows) + "\n"


#: The page and the markers its generated table sits between.
PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"
BEGIN = "<!-- exit codes: begin (python -m server.net.exit_codes) -->"
END = "<!-- exit codes: end -->"


def with_table(page: str) -> str:
    """``page`` with the text between its markers replaced by :func:`render_table`.

    Raises:
        ValueError: the page lacks the markers.
    """
    found = re.search(re.escape(BEGIN) + r"\n.*?" + re.escape(END), page, re.DOTALL)
    if found is None:
        raise ValueError(f"the page has no {BEGIN!r} … {END!r} markers")
    return page[: found.start()] + f"{BEGIN}\n{render_table()}{END}" + page[found.end() :]


if __name__ == "__main__":  # pragma: no cover - the page's generator
    PAGE.write_text(with_table(PAGE.read_text()))
    sys.stdout.write(f"{PAGE}\n")
