"""Signals sent to a whole process group (Ctrl-C, ``timeout``, ``kill -TERM -PGID``, CI
cancellation) and the helper processes of a run.

Ctrl-C and a group SIGTERM reach every process of the group at once. The helper processes a
run spawns (the scraper, the load generator's workers) ignore both and let their parent stop
them in order: the parent owns the run's status, asks each helper to finish, and each helper
then closes and flushes its own files. A helper that died on the signal instead would leave a
gzip stream cut short. ``blocked_while_spawning`` closes the gap between the child's start
and its ``leave_stop_to_parent`` call: the child starts with both signals blocked (a signal
mask survives fork and exec), and a signal that arrives meanwhile is discarded once the child
ignores it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

#: The signals a group receives when it is stopped from outside: Ctrl-C and SIGTERM.
GROUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def blocked_while_spawning() -> Iterator[None]:
    """Block ``GROUP_SIGNALS`` in the calling thread while it starts a helper process; the
    thread's previous mask is restored after (a signal that arrived meanwhile is then handled
    by this process as usual)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def leave_stop_to_parent() -> None:
    """In a helper process: ignore ``GROUP_SIGNALS`` (the parent stops this process in order
    after one), then unblock them (``blocked_while_spawning`` blocked them)."""
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)
