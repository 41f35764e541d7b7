"""Benchmark 5: what the gateway adds, against direct and against nginx, same run, same server.

The fake server (TTFT 50 ms, 10 ms between tokens, 8–24 tokens, mean 16, varied per request so
the streams desynchronize) is reached three ways: directly,
through the project's gateway (``python -m gateway.cli``), and through nginx (a streaming
reverse proxy: ``proxy_buffering off``, keep-alive upstream; see ``anchors.nginx_config``).
Each proxy is one process pinned alone to core 1; our client and the fake server share core 0
(the server then waits on timers, not spinning: its ~1 ms timer grain is the same for all
three ways). At 1 and 64 concurrent streams, direct → gateway → nginx, 2 rounds.

- added TTFT and E2EL, p50 and p99 (ms), and where the added TTFT goes: the legs client send
  → server read and server first write → client first token (the server logs its own
  stamps), each minus direct's. Figures are a proxy's minus direct's, pooled over the
  rounds, after each run's first wave (its first C requests, sent at once: at 64 streams a
  burst that a proxy forwards one request after the other; reported apart).
- capacity: streams/s through one proxy process on one core, zero-delay server, 16-token
  streams, 64 in flight, with the proxy's CPU share (at ~100 % the proxy is the limit; below,
  the client and server on the other core are, and the figure is a lower bound).
Targets: the gateway's added p50 (TTFT and E2EL) ≤ 1 ms and ≤ 1.5× nginx's.
When nginx is not installed the anchor is recorded as unavailable (``make bench`` installs it).
Run: ``python tests/benchmarks/bench_gateway.py [--tiny] [--out DIR]``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import harness as h
from anchors import nginx_binary, nginx_config

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


def _wait_health(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not healthy in {timeout_s:.0f} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = _free_port()
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
    log = open(workdir / "gateway.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        h.pinned(argv, PROXY_CPU),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=h.REPO,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_health(url, proc)
        yield url, proc.pid
    finally:
        _stop(proc)
        log.close()


@contextmanager
def nginx(upstream: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """nginx (one process, no master) on :data:`PROXY_CPU`: (url, pid)."""
    binary = nginx_binary()
    assert binary is not None
    port = _free_port()
    conf = nginx_config(workdir, port, upstream)
    argv = [
        binary,
        "-p",
        str(workdir),
        "-e",
        str(workdir / "error.log"),
        "-c",
        str(conf),
    ]
    proc = subprocess.Popen(
        h.pinned(argv, PROXY_CPU), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_health(url, proc)
        yield url, proc.pid
    finally:
        _stop(proc)


def run(tiny: bool) -> dict[str, Any]:
    levels = {1: 3, 4: 8} if tiny else {1: 12, 64: 256}  # streams: requests per run
    rounds = 1 if tiny else 2
    capacity_n = 64 if tiny else 2048
    tokens = 4 if tiny else TOKENS
    have_nginx = nginx_binary() is not None
    profile: list[dict[str, Any]] = []
    lat: dict[str, dict[str, dict[str, list[float]]]] = {}
    first_wave: dict[str, dict[str, dict[str, list[float]]]] = {}
    capacity: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(h.FakeServer(cpu=h.CLIENT_CPU))
        proxies = {"direct": (server.url, None)}
        proxies["gateway"] = stack.enter_context(gateway(server.url, tmp))
        if have_nginx:
            (tmp / "nginx").mkdir()
            proxies["nginx"] = stack.enter_context(nginx(server.url, tmp / "nginx"))

        async def measure() -> None:
            server.configure(TTFT_MS, ITL_MS, spin=False)
            first = 0
            for c, n in levels.items():
                per = lat.setdefault(str(c), {})
                for _ in range(rounds):
                    for name, (url, _pid) in proxies.items():
                        server.take_log()
                        out = await h.ours(
                            url,
                            n,
                            concurrency=c,
                            max_tokens=4 if tiny else tokens_of,
                            first_index=first,
                        )
                        log = {e["key"]: e for e in server.take_log()}
                        first += n
                        assert out.failed == 0, f"{name}: {out.failed} failed"
                        for p in out.per_request:
                            into = per if p["index"] >= c else first_wave.setdefault(str(c), {})
                            got = into.setdefault(name, {k: [] for k in LEGS})
                            got["ttft_ms"].append(p["ttft_ms"])
                            got["e2el_ms"].append(p["e2el_ms"])
                            if (e := log.get(p["key"])) is not None:
                                got["to_server_ms"].append((e["read_ns"] - p["sent_ns"]) / 1e6)
                                got["to_client_ms"].append(
                                    (p["first_token_ns"] - e["first_write_ns"]) / 1e6
                                )
            server.configure(0, 0)
            for name, (url, pid) in proxies.items():
                if pid is None:
                    continue
                cpu0 = h.process_cpu_s(pid)
                out = await h.ours(url, capacity_n, concurrency=64, max_tokens=tokens)
                assert out.failed == 0, f"{name}: {out.failed} failed"
                capacity[name] = {
                    "streams_per_s": round(capacity_n / out.wall_s, 1),
                    "proxy_cpu_share": round((h.process_cpu_s(pid) - cpu0) / out.wall_s, 3),
                    "client_cpu_share": round(out.cpu_s / out.wall_s, 3),
                }
                h.progress(f"  capacity {name}: {capacity[name]}")

        h.run_loop(measure())
        if not tiny:  # where the gateway's CPU goes under the capacity load
            with gateway(server.url, tmp, profile_to=tmp / "gateway.prof") as (
                url,
                _pid,
            ):
                h.run_loop(h.ours(url, capacity_n, concurrency=64, max_tokens=TOKENS))
            profile = profile_top(tmp / "gateway.prof")
    summary: dict[str, Any] = {}
    rows = []
    for c, per in lat.items():
        summary[c] = {name: {k: h.dist(v) for k, v in m.items()} for name, m in per.items()}
        direct = summary[c]["direct"]
        for name in per:
            if name == "direct":
                continue
            summary[c][name]["added"] = {
                f"{k}_{q}": round(summary[c][name][k][q] - direct[k][q], 3)
                for k in LEGS
                for q in ("p50", "p99")
                if summary[c][name][k][q] is not None and direct[k][q] is not None
            }
        for k, label in (("ttft_ms", "TTFT"), ("e2el_ms", "E2EL")):
            for q in ("p50", "p99"):
                ours_v = summary[c]["gateway"]["added"][f"{k}_{q}"]
                nginx_v = summary[c]["nginx"]["added"][f"{k}_{q}"] if have_nginx else None
                target = q == "p50"
                met = None
                if target:
                    met = ours_v <= TARGET_ADDED_MS and (
                        nginx_v is None or ours_v <= TARGET_VS_NGINX * max(nginx_v, 0.0)
                    )
                rows.append(
                    h.row(
                        f"added {label} {q}, {c} streams",
                        ours_v,
                        nginx_v,
                        f"≤ {TARGET_ADDED_MS:g} ms and ≤ {TARGET_VS_NGINX:g}× nginx"
                        if target
                        else "",
                        met,
                        "ms",
                    )
                )
    rows.append(
        h.row(
            "streams/s through one proxy process",
            capacity["gateway"]["streams_per_s"],
            capacity["nginx"]["streams_per_s"] if have_nginx else None,
            "",
            None,
            "streams/s",
        )
    )
    return {
        "config": {
            "ttft_ms": TTFT_MS,
            "itl_ms": ITL_MS,
            "tokens": "4" if tiny else "8-24 per request (mean 16); capacity: 16",
            "requests": {str(c): n for c, n in levels.items()},
            "rounds": rounds,
            "capacity_requests": capacity_n,
        },
        "anchor_available": have_nginx,
        "rows": rows,
        "summary": summary,
        "first_wave": {
            c: {name: {k: h.dist(v) for k, v in m.items()} for name, m in per.items()}
            for c, per in first_wave.items()
        },
        "capacity": capacity,
        "gateway_cpu_profile": profile,
    }


if __name__ == "__main__":
    h.bench_main(NAME, run)
