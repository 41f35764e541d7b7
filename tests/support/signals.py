"""Children that a test signals start with the signal dispositions the test expects.

A process inherits an ignored SIGINT or SIGTERM across ``exec`` (a shell starts a background
job, ``make test &`` or ``nohup … &``, with SIGINT and SIGQUIT ignored), and the product
rightly honours an inherited ``SIG_IGN``. A test that sends a child SIGINT or SIGTERM must
therefore not depend on how the test session itself was started: it passes
:func:`default_signals` as the child's ``preexec_fn``.
"""

from __future__ import annotations

import signal

#: The signals tests send to children and expect to be acted on.
SENT_BY_TESTS = (signal.SIGINT, signal.SIGTERM)


def default_signals() -> None:
    """Set SIGINT and SIGTERM to their default action (``SIG_DFL``) in the calling process:
    a ``preexec_fn`` for :class:`subprocess.Popen`, run in the child between fork and exec."""
    for sig in SENT_BY_TESTS:
        signal.signal(sig, signal.SIG_DFL)
