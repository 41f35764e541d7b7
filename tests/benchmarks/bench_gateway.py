"""Benchmark 5: what the gateway adds, against direct, nginx and vllm-router (same run, server).

The fake server (TTFT 50 ms, 10 ms between tokens, 8–24 tokens, mean 16, varied per request so
the streams desynchronize) is reached four ways: directly, through the project's gateway
(``python -m gateway.cli``), through nginx and through vllm-router (vLLM's Rust load balancer,
one worker), each third-party proxy exactly as the project runs it (``loadgen.proxies``, the
definitions disconnect-abort uses; ``anchors.proxy_argv``): nginx as a streaming reverse proxy
(``proxy_buffering off``, keep-alive upstream, ``nginx_config``; its ``proxy_read_timeout``
is 3600 s where this benchmark's own config had 300 s, and request buffering is nginx's
default, on, as that config set it: neither changes a figure here), vllm-router with
``router_argv`` (its defaults, the cache-aware policy included, no retries, its Prometheus
endpoint on a free loopback port). Each proxy is one process pinned alone to core 1; our
client and the fake server share core 0 (the server then waits on timers, not spinning: its
~1 ms timer grain is the same for every way). A proxy is used once its ``/health`` answers
200 (vllm-router's answers once its own poll of the server's ``/health`` has) and a
completion through it has streamed to ``[DONE]``. At 1 and 64 concurrent streams, direct →
gateway → nginx → vllm-router, 2 rounds.

- added TTFT and E2EL, p50 and p99 (ms), and where the added TTFT goes: the legs client send
  → server read and server first write → client first token (the server logs its own
  stamps), each minus direct's. Figures are quantiles of the per-request differences (request
  i of round r through the proxy minus the same request sent directly), pooled over the
  rounds, after each run's first wave (its first C requests, sent at once: at 64 streams a
  burst that a proxy forwards one request after the other; reported apart).
- each proxy's cost in those latency runs (``proxy_cost``): CPU µs per request, wake-ups
  per request and CPU µs per wake-up, exact from ``/proc/PID/task/*/schedstat``; at one
  stream it tells the proxy's own (cold) code from waiting.
- capacity: streams/s through one proxy process on one core, zero-delay server, 16-token
  streams, 64 in flight, with the proxy's CPU share (at ~100 % the proxy is the limit; below,
  the client and server on the other core are, and the figure is a lower bound).

Rows: ours is the gateway; each figure's anchor is nginx (``anchor_name``), and the same figure
again with vllm-router as its anchor (metric ``…, vs vllm-router``), a peer with no target.
Targets: the gateway's added p50 (TTFT and E2EL) ≤ 1 ms and ≤ 1.5× nginx's.
A proxy that is not installed (or does not start) is recorded as unavailable, with why, and
the benchmark goes on without it (``make proxies`` installs both).
Run: ``python tests/benchmarks/bench_gateway.py [--tiny] [--out DIR]``.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import drivers
import harness as h
from anchors import PROXY_ANCHORS, proxy_argv, proxy_binary, proxy_version

from loadgen.proxies import ProxyNotInstalledError
from loadgen.proxies.vllm_router import ROUTER_ENV
from server.logs import log_tail
from server.net.health import NotHealthy, wait_healthy
from server.net.loop import run_event_loop
from server.process import free_loopback_port

NAME = "gateway"
PROXY_CPU = 1
TTFT_MS, ITL_MS, TOKENS = 50.0, 10.0, 16


#: Per request: TTFT, E2EL, and the two legs a proxy sits on (the server logs its own read
#: and first write): client send → server read, server first write → client first token.
LEGS = ("ttft_ms", "e2el_ms", "to_server_ms", "to_client_ms")


def tokens_of(i: int) -> int:
    """Request ``i``'s output length: 8–24 tokens (mean 16), so streams end at different
    times and, after the first wave, requests and chunks do not come in lockstep."""
    return 8 + (i * 7919) % 17


TARGET_ADDED_MS = 1.0
TARGET_VS_NGINX = 1.5
#: The anchor the targets are set against; vllm-router is measured beside it as a peer.
TARGET_ANCHOR = "nginx"


#: The readiness request's prompt token (the server keys its log by it; cleared before use).
READY_KEY = 999_999


def _completes(url: str) -> bool:
    """Whether one 1-token streamed completion through ``url`` answers 200 and ends in
    ``[DONE]``."""
    body = json.dumps(
        {"model": h.MODEL, "prompt": [READY_KEY], "max_tokens": 1, "stream": True}
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status == 200 and b"data: [DONE]" in response.read()


def _wait_ready(
    url: str, proc: subprocess.Popen[bytes], log: Path, name: str, timeout_s: float = 60.0
) -> None:
    """Return once ``url/health`` is healthy (``server.net.health``) and a completion through
    ``url`` streams to its end (vllm-router's ``/health`` answers 200 only after its own
    poll of the server's).

    Raises:
        RuntimeError: the process exited, or it was not ready within ``timeout_s`` seconds;
            the message quotes the end of ``log``.
    """
    deadline = time.monotonic() + timeout_s
    try:
        run_event_loop(wait_healthy(url, timeout_s=timeout_s, every_s=0.05, exited=proc.poll))
        while time.monotonic() < deadline and proc.poll() is None:
            with suppress(OSError, http.client.HTTPException):
                if _completes(url):
                    return
            time.sleep(0.05)
    except NotHealthy:
        pass
    if proc.poll() is not None:
        raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail(log)}")
    raise RuntimeError(f"{name} at {url} not ready in {timeout_s:.0f} s:\n{log_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# The gateway's command under cProfile with a CPU-time clock (waiting is not cost).
_PROFILED = """
import cProfile, sys, time
out = sys.argv.pop(1)
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    from gateway.cli import main
    main(sys.argv[1:])
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""


def profile_top(path: Path, top: int = 12) -> list[dict[str, Any]]:
    """The functions that used the most CPU in their own code, with their share (0–1)."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values()) or 1.0
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    out = []
    for (file, line, func), (_cc, calls, own_s, _cum_s, _callers) in rows:
        where = file.split("site-packages/")[-1].split(str(h.REPO) + "/")[-1]
        out.append(
            {
                "function": f"{where}:{line}({func})",
                "calls": calls,
                "own_cpu_share": round(own_s / total, 3),
            }
        )
    return out


@contextmanager
def gateway(
    upstream: str, workdir: Path, profile_to: Path | None = None
) -> Iterator[tuple[str, int]]:
    """The project's gateway in its own process on :data:`PROXY_CPU`: (url, pid); with
    ``profile_to``, under cProfile counting CPU time, its stats written there at exit."""
    port = free_loopback_port()
    start = ["-c", _PROFILED, str(profile_to)] if profile_to else ["-m", "gateway.cli"]
    argv = [
        sys.executable,
        *start,
        "--upstream",
        upstream,
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]
    env = {**os.environ, "PYTHONPATH": str(h.REPO)}
    log_path = workdir / "gateway.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        h.pinned(argv, PROXY_CPU),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=h.REPO,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc, log_path, "gateway")
        yield url, proc.pid
    finally:
        _stop(proc)
        log.close()


@contextmanager
def anchor_proxy(name: str, binary: str, upstream: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """Proxy anchor ``name`` (``anchors.proxy_argv``: one nginx process without a master, or
    vllm-router) on :data:`PROXY_CPU`, its log in ``workdir``: (url, pid) once ready."""
    port = free_loopback_port()
    workdir.mkdir(parents=True, exist_ok=True)
    argv = proxy_argv(name, binary, upstream, port, workdir)
    out_path = workdir / f"{name}.log"
    # nginx writes its errors to workdir/error.log (-e); the router logs to its output.
    log_path = workdir / "error.log" if name == "nginx" else out_path
    env = {**os.environ, **ROUTER_ENV}  # as loadgen.proxies runs the router
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            h.pinned(argv, PROXY_CPU), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc, log_path, name)
        yield url, proc.pid
    finally:
        _stop(proc)


def start_anchors(
    stack: ExitStack, upstream: str, tmp: Path
) -> tuple[dict[str, tuple[str, int]], dict[str, dict[str, Any]]]:
    """Start every proxy anchor that is installed; (name → (url, pid)) for those that run,
    and per anchor what is known of it: installed, available (measured), binary, version,
    and why not when it is unavailable. One that is missing or fails to start is left out;
    the benchmark goes on without it."""
    running: dict[str, tuple[str, int]] = {}
    info: dict[str, dict[str, Any]] = {}
    for name in PROXY_ANCHORS:
        binary: str | None = None
        why: str | None = None
        try:
            binary = proxy_binary(name)
        except ProxyNotInstalledError as exc:
            why = str(exc)
        about: dict[str, Any] = {
            "installed": binary is not None,
            "available": False,
            "binary": binary,
            "version": proxy_version(name, binary) if binary else None,
            "why_unavailable": why,
        }
        if binary is not None:
            try:
                running[name] = stack.enter_context(
                    anchor_proxy(name, binary, upstream, tmp / name)
                )
                about["available"] = True
            except (OSError, RuntimeError) as exc:
                about["why_unavailable"] = f"did not start: {exc}"
        if not about["available"]:
            h.progress(f"  {name} unavailable: {about['why_unavailable']}")
        info[name] = about
    return running, info


def _rows(summary: dict[str, Any], capacity: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """The table: per streams level, added TTFT and E2EL p50/p99 of the gateway against nginx
    (the target's anchor; p50 has the target) and the same figure against vllm-router (a
    peer, no target), each pair side by side; then streams/s through one proxy process.
    A row's ``anchor_name`` says which proxy its anchor is (its figure ``None``: unavailable)."""

    def added(c: str, name: str, key: str) -> float | None:
        value: float | None = summary[c].get(name, {}).get("added", {}).get(key)
        return value

    rows = []
    for c in summary:
        for k, label in (("ttft_ms", "TTFT"), ("e2el_ms", "E2EL")):
            for q in ("p50", "p99"):
                ours_v = added(c, "gateway", f"{k}_{q}")
                metric = f"added {label} {q}, {c} streams"
                for anchor in PROXY_ANCHORS:
                    anchor_v = added(c, anchor, f"{k}_{q}")
                    target, met = "", None
                    if anchor == TARGET_ANCHOR and q == "p50":
                        target = f"≤ {TARGET_ADDED_MS:g} ms and ≤ {TARGET_VS_NGINX:g}× nginx"
                        met = (
                            ours_v is not None
                            and ours_v <= TARGET_ADDED_MS
                            and (anchor_v is None or ours_v <= TARGET_VS_NGINX * max(anchor_v, 0.0))
                        )
                    name = metric if anchor == TARGET_ANCHOR else f"{metric}, vs {anchor}"
                    rows.append(
                        {**h.row(name, ours_v, anchor_v, target, met, "ms"), "anchor_name": anchor}
                    )
    for anchor in PROXY_ANCHORS:
        metric = "streams/s through one proxy process"
        rows.append(
            {
                **h.row(
                    metric if anchor == TARGET_ANCHOR else f"{metric}, vs {anchor}",
                    capacity["gateway"]["streams_per_s"],
                    capacity.get(anchor, {}).get("streams_per_s"),
                    "",
                    None,
                    "streams/s",
                ),
                "anchor_name": anchor,
            }
        )
    return rows


#: (streams level →) proxy → leg → per-request values (ms)
Legs = dict[str, dict[str, dict[str, list[float]]]]


@dataclass
class _Measured:
    """What the runs measured, per streams level (as text) and proxy.

    ``lat``: legs after each run's first wave; ``first_wave``: legs of the first waves;
    ``paired``: (round, request index) → legs, for the paired differences; ``run_cost``:
    [CPU ns, context switches, requests] over the proxy's latency runs; ``capacity``: per
    proxy, streams/s and CPU shares of the capacity run.
    """

    lat: dict[str, Legs] = field(default_factory=dict)
    first_wave: dict[str, Legs] = field(default_factory=dict)
    paired: dict[str, dict[str, dict[tuple[int, int], dict[str, float]]]] = field(
        default_factory=dict
    )
    run_cost: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    capacity: dict[str, dict[str, float]] = field(default_factory=dict)

    def record(self, out: Any, log: dict[Any, Any], c: int, r: int, name: str) -> None:
        """File run ``out`` of round ``r`` at ``c`` streams through ``name`` (``log``: the
        server's stamps by request key)."""
        per = self.lat.setdefault(str(c), {})
        for p in out.per_request:
            into = per if p["index"] >= c else self.first_wave.setdefault(str(c), {})
            got = into.setdefault(name, {k: [] for k in LEGS})
            legs = {"ttft_ms": p["ttft_ms"], "e2el_ms": p["e2el_ms"]}
            if (e := log.get(p["key"])) is not None:
                legs["to_server_ms"] = (e["read_ns"] - p["sent_ns"]) / 1e6
                legs["to_client_ms"] = (p["first_token_ns"] - e["first_write_ns"]) / 1e6
            for k, v in legs.items():
                got[k].append(v)
            if p["index"] >= c:  # request i of round r: the same on every path
                by_request = self.paired.setdefault(str(c), {}).setdefault(name, {})
                by_request[(r, p["index"])] = legs

    def add_cost(self, c: int, name: str, before: tuple[int, int], pid: int, n: int) -> None:
        """Add the proxy's CPU ns and context switches since ``before``, and ``n`` requests."""
        after = h.process_run_stats(pid)
        used = self.run_cost.setdefault(str(c), {}).setdefault(name, [0, 0, 0])
        used[0] += after[0] - before[0]
        used[1] += after[1] - before[1]
        used[2] += n


async def _latency_runs(
    m: _Measured,
    server: h.FakeServer,
    proxies: dict[str, tuple[str, int | None]],
    levels: dict[int, int],
    rounds: int,
    tiny: bool,
) -> None:
    """Every proxy at every streams level, ``rounds`` times, each run's requests new ones."""
    server.configure(TTFT_MS, ITL_MS, spin=False)
    first = 0
    for c, n in levels.items():
        for r in range(rounds):
            for name, (url, pid) in proxies.items():
                server.take_log()
                before = h.process_run_stats(pid) if pid is not None else None
                out = await drivers.ours(
                    url,
                    n,
                    concurrency=c,
                    max_tokens=4 if tiny else tokens_of,
                    first_index=first,
                )
                if before is not None and pid is not None:
                    m.add_cost(c, name, before, pid, n)
                log = {e["key"]: e for e in server.take_log()}
                first += n
                assert out.failed == 0, f"{name}: {out.failed} failed"
                m.record(out, log, c, r, name)


async def _capacity_runs(
    m: _Measured,
    server: h.FakeServer,
    proxies: dict[str, tuple[str, int | None]],
    capacity_n: int,
    tokens: int,
) -> None:
    """Streams/s through each proxy process from a zero-delay server, with CPU shares."""
    server.configure(0, 0)
    for name, (url, pid) in proxies.items():
        if pid is None:
            continue
        cpu0 = h.process_cpu_s(pid)
        out = await drivers.ours(url, capacity_n, concurrency=64, max_tokens=tokens)
        assert out.failed == 0, f"{name}: {out.failed} failed"
        m.capacity[name] = {
            "streams_per_s": round(capacity_n / out.wall_s, 1),
            "proxy_cpu_share": round((h.process_cpu_s(pid) - cpu0) / out.wall_s, 3),
            "client_cpu_share": round(out.cpu_s / out.wall_s, 3),
        }
        h.progress(f"  capacity {name}: {m.capacity[name]}")


def run(tiny: bool) -> dict[str, Any]:
    levels = {1: 3, 4: 8} if tiny else {1: 12, 64: 256}  # streams: requests per run
    rounds = 1 if tiny else 2
    capacity_n = 64 if tiny else 2048
    tokens = 4 if tiny else TOKENS
    profile: list[dict[str, Any]] = []
    m = _Measured()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(h.FakeServer(cpu=h.CLIENT_CPU))
        proxies: dict[str, tuple[str, int | None]] = {"direct": (server.url, None)}
        proxies["gateway"] = stack.enter_context(gateway(server.url, tmp))
        running, anchors = start_anchors(stack, server.url, tmp)
        proxies.update(running)

        async def measure() -> None:
            await _latency_runs(m, server, proxies, levels, rounds, tiny)
            await _capacity_runs(m, server, proxies, capacity_n, tokens)

        run_event_loop(measure())
        if not tiny:  # where the gateway's CPU goes under the capacity load
            with gateway(server.url, tmp, profile_to=tmp / "gateway.prof") as (
                url,
                _pid,
            ):
                run_event_loop(drivers.ours(url, capacity_n, concurrency=64, max_tokens=TOKENS))
            profile = profile_top(tmp / "gateway.prof")
    summary: dict[str, Any] = {}
    for c, per in m.lat.items():
        summary[c] = {name: {k: h.dist(v) for k, v in legs.items()} for name, legs in per.items()}
        for name in per:
            if name != "direct":
                summary[c][name]["added"] = added_paired(m.paired[c]["direct"], m.paired[c][name])
    return {
        "config": {
            "ttft_ms": TTFT_MS,
            "itl_ms": ITL_MS,
            "tokens": "4" if tiny else "8-24 per request (mean 16); capacity: 16",
            "requests": {str(c): n for c, n in levels.items()},
            "rounds": rounds,
            "capacity_requests": capacity_n,
        },
        # The targets' anchor (nginx); every proxy anchor's own state is in "anchors".
        "anchor_available": anchors[TARGET_ANCHOR]["available"],
        "anchors": anchors,
        "rows": _rows(summary, m.capacity),
        "summary": summary,
        "first_wave": {
            c: {name: {k: h.dist(v) for k, v in legs.items()} for name, legs in per.items()}
            for c, per in m.first_wave.items()
        },
        "capacity": m.capacity,
        "proxy_cost": proxy_cost(m.run_cost),
        "gateway_cpu_profile": profile,
    }


def added_paired(
    direct: dict[tuple[int, int], dict[str, float]], via: dict[tuple[int, int], dict[str, float]]
) -> dict[str, float]:
    """What a proxy adds, per leg (module docstring), p50 and p99 in ms: the quantiles of
    the per-request differences, request i of round r through the proxy minus the same
    request sent directly (the same output length, the same place in its run).

    Not the difference of the two quantiles: E2EL moves in steps of one ITL with the output
    length, and one request late by a step moves a median of 22 by a whole 10 ms step."""
    out: dict[str, float] = {}
    keys = sorted(set(direct) & set(via))
    for k in LEGS:
        diffs = [via[i][k] - direct[i][k] for i in keys if k in via[i] and k in direct[i]]
        for q, frac in (("p50", 0.5), ("p99", 0.99)):
            value = h.pct(diffs, frac)
            if value is not None:
                out[f"{k}_{q}"] = round(value, 3)
    return out


def proxy_cost(run_cost: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, Any]]:
    """Per streams level and proxy, over its latency runs: CPU µs per request, wake-ups
    (context switches) per request and CPU µs per wake-up (``h.process_run_stats``). At one
    stream this says whether the added latency is the proxy's own code or waiting."""
    out: dict[str, dict[str, Any]] = {}
    for c, per in run_cost.items():
        for name, (cpu_ns, switches, requests) in per.items():
            out.setdefault(c, {})[name] = {
                "cpu_us_per_request": round(cpu_ns / 1e3 / max(requests, 1), 1),
                "wakeups_per_request": round(switches / max(requests, 1), 2),
                "cpu_us_per_wakeup": round(cpu_ns / 1e3 / switches, 1) if switches else None,
            }
    return out


if __name__ == "__main__":
    h.bench_main(NAME, run)
