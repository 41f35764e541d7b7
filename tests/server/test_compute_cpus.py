"""Finding where a server computes (server.cpus): its bound threads' cores, through its whole
process tree, and an attached server by the port it listens on."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.cpus import ServerHost, compute_cpus, is_this_host, listener_pid, process_tree

# Like vLLM's CPU build: the root (API server) listens on a port and runs anywhere; its
# child (engine core) runs anywhere; the grandchild (worker) binds a thread to one core.
# The root prints its port and the pids of the tree once the binding is made.
_TREE = r"""
import os, socket, subprocess, sys, time
core = int(sys.argv[1])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
worker = ("import os, threading, time\n"
          f"t = threading.Thread(target=lambda: (os.sched_setaffinity(0, {{{core}}}), "
          "time.sleep(60)), daemon=True)\n"
          "t.start(); time.sleep(0.3); print(os.getpid(), flush=True); time.sleep(60)")
engine = ("import subprocess, sys, time\n"
          f"w = subprocess.Popen([sys.executable, '-c', {worker!r}], stdout=subprocess.PIPE, "
          "text=True)\n"
          "print(__import__('os').getpid(), w.stdout.readline().strip(), flush=True); "
          "time.sleep(60)")
child = subprocess.Popen([sys.executable, "-c", engine], stdout=subprocess.PIPE, text=True)
print(listener.getsockname()[1], os.getpid(), child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def fake_server_tree() -> Iterator[tuple[int, list[int], int]]:
    """(port, [root, engine, worker] pids, the core the worker's thread is bound to)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("a bound thread needs fewer cores than the process may use: two at least")
    # The last core: a vLLM worker, if one runs, computes on the first ones, and a thread
    # moved onto its busy core can wait there for seconds (loadgen.placement).
    core = cores[-1]
    proc = subprocess.Popen(
        [sys.executable, "-c", _TREE, str(core)], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    port, *pids = (int(x) for x in proc.stdout.readline().split())
    yield port, pids, core
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_the_tree_holds_the_root_and_every_descendant(
    fake_server_tree: tuple[int, list[int], int],
) -> None:
    _, pids, _ = fake_server_tree
    assert process_tree(pids[0]) == sorted(pids)
    assert process_tree(pids[2]) == [pids[2]]  # the worker has no children


def test_the_compute_set_is_the_bound_threads_cores(
    fake_server_tree: tuple[int, list[int], int],
) -> None:
    _, pids, core = fake_server_tree
    assert compute_cpus(pids[0]) == {core}
    assert compute_cpus(pids[1]) == {core}  # from the engine core down: the same worker


def test_nothing_bound_means_no_compute_set() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert compute_cpus(idle.pid) is None
    finally:
        idle.kill()
        idle.wait()


def test_an_attached_server_is_found_by_its_port(
    fake_server_tree: tuple[int, list[int], int],
) -> None:
    port, pids, core = fake_server_tree
    assert listener_pid(port) == pids[0]
    assert ServerHost.of_url(f"http://127.0.0.1:{port}") == ServerHost(True, pids[0], [core])
    assert ServerHost.of_url(f"http://localhost:{port}") == ServerHost(True, pids[0], [core])


def test_a_port_nobody_listens_on_has_no_process() -> None:
    with socket.socket() as sock:  # bound but not listening: no LISTEN entry
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert listener_pid(port) is None
        assert ServerHost.of_url(f"http://127.0.0.1:{port}") == ServerHost(True)


def test_which_hosts_are_this_machine() -> None:
    assert is_this_host("127.0.0.1") and is_this_host("localhost") and is_this_host("::1")
    assert not is_this_host("")  # does not resolve
    nonlocal_bind = Path("/proc/sys/net/ipv4/ip_nonlocal_bind")
    if nonlocal_bind.exists() and nonlocal_bind.read_text().strip() == "1":
        return  # any address can be bound here: nothing tells this machine's from others
    assert not is_this_host("192.0.2.7")  # TEST-NET-1 (RFC 5737): held by no interface here
    assert ServerHost.of_url("http://192.0.2.7:8000") == ServerHost(False)


def test_the_listener_is_matched_by_address_and_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        me = os.getpid()
        assert listener_pid(port, {ipaddress.ip_address("127.0.0.1")}) == me
        assert listener_pid(port) == me  # any address
        assert listener_pid(port, {ipaddress.ip_address("::1")}) is None  # another address
    with socket.socket(socket.AF_INET6) as wildcard:
        wildcard.bind(("::", 0))  # dual-stack: accepts 127.0.0.1 too
        wildcard.listen()
        port = wildcard.getsockname()[1]
        assert listener_pid(port, {ipaddress.ip_address("127.0.0.1")}) == me


_FORKED = r"""
import os, socket, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
child = os.fork()  # the child holds the listening socket too
if child == 0:
    time.sleep(60)
    os._exit(0)
print(listener.getsockname()[1], os.getpid(), child, flush=True)
time.sleep(60)
"""


def test_of_the_processes_holding_the_socket_the_root_is_found() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKED], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        port, parent, child = (int(x) for x in proc.stdout.readline().split())
        assert Path(f"/proc/{child}").exists()  # a second holder of the socket
        assert listener_pid(port) == parent
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
