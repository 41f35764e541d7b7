"""What the run prints is shown as written: text from a server, a proxy's log or a path is
never read as rich markup (nginx's ``[emerg]`` tag vanished from a start-up failure)."""

from __future__ import annotations

import io

from rich.console import Console

from loadgen.progress import RichProgress


def test_a_message_with_brackets_is_printed_literally() -> None:
    out = io.StringIO()
    progress = RichProgress(Console(file=out, width=200, color_system=None))
    message = "case nginx: nginx exited: [emerg] 14808#14808: unknown directive [/yellow]"
    progress.hooks().message(message)
    assert message in out.getvalue()
