"""Quoting the end of a process's log: the one log tail of every start-up failure message.

vLLM, nginx, vllm-router and the gateway each write a log file (``server.process.spawn_group``);
when one fails to start, the error quotes the end of its logs with :func:`log_tail`. Terminal
escape sequences are removed (vllm-router colours its log even when it is a file), so a quoted
log reads the same on a terminal and in a file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

#: Terminal colour and cursor sequences (CSI ... final byte), which a quoted log must not carry.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def read_log(path: Path) -> str:
    """The whole text of ``path`` (undecodable bytes replaced); ``""`` when it does not exist
    or cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def last_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` non-blank lines of ``path``, escape sequences removed (fewer when
    it has fewer; none when it does not exist)."""
    text = _ANSI_ESCAPE.sub("", read_log(path))
    return [line for line in text.splitlines() if line.strip()][-lines:]


def log_tail(paths: Path | Sequence[Path], lines: int = 40, max_chars: int = 8000) -> str:
    """The end of each log of ``paths`` that has any line, each under its path
    (``"PATH:\\nLINES"``): its last ``lines`` lines, cut to the last ``max_chars``
    characters; ``"(nothing in PATH, PATH)"`` when none has a line."""
    paths = [paths] if isinstance(paths, Path) else list(paths)
    parts = []
    for path in paths:
        text = "\n".join(last_lines(path, lines))
        if text:
            parts.append(f"{path}:\n{text[-max_chars:]}")
    return "\n".join(parts) if parts else f"(nothing in {', '.join(map(str, paths))})"
