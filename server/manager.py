"""Start a real vLLM (or attach to a running one), wait until healthy, read capacity, stop.

``start_server()`` spawns vLLM in its own process group on a free loopback port, streams the
log to a file, races ``/health`` against process exit and reads the real KV capacity;
``RunningServer.stop()`` ends with SIGTERM → grace → SIGKILL on the whole group. The
orchestrator uses these two directly (a server can serve several cases and outlive a block).
``attach()`` wraps an external server (a GPU deployment) without owning its lifetime.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from server.capacity import (
    KVCapacity,
    cache_config_problem,
    capacity_from_log,
    capacity_from_metrics,
)
from server.config import ServerConfig
from server.cpus import ServerHost
from server.embedded_model import ensure_draft_model, ensure_embedded_model
from server.engine_flags import adapt_command
from server.engines import Engine, inspect_engine
from server.files import replace_whole
from server.logs import last_lines, log_tail, read_log
from server.model_variant import VariantDecision
from server.net.errors import describe_exception
from server.net.health import NotHealthy, check_health, wait_healthy
from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES, METRICS_MAX_BYTES
from server.priority import lower_engine_core_priority, lower_session_priority
from server.process import free_loopback_port, port_is_free, spawn_group, stop_group
from server.workdir import COMMAND_FILE, SERVER_FILE, VLLM_LOG

#: Called about once a second while waiting: (elapsed seconds, last log line).
StatusCallback = Callable[[float, str], None]

_ENV_TO_RECORD = (
    "HF_HUB_OFFLINE",
    "VLLM_CACHE_ROOT",
    "VLLM_CPU_OMP_THREADS_BIND",
    "OMP_NUM_THREADS",
)


class ServerStartError(RuntimeError):
    """vLLM did not become healthy. The message names the likely cause and quotes the log tail.

    ``pid`` is the process-group leader that was started (already stopped), if any.
    """

    pid: int | None = None


@dataclass
class RunningServer:
    """A healthy vLLM server.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:41234`` (no trailing slash).
        model_name: the served model name to put in requests.
        capacity: KV capacity read back from the server; ``None`` when it could not be read,
            and then ``capacity_error`` says why (status, redirect target, missing family).
        version: vLLM version string reported by ``/version``.
        pid: the API server's pid (the process-group leader) or ``None`` when attached.
        log_path: the server log, or ``None`` when attached.
        argv: the command line, empty when attached.
        startup_s: seconds from spawn to healthy, ``None`` when attached.
        model_variant: the embedded model's variant and why it was chosen,
            ``{"variant": "bf16" | "fp32", "reason": "..."}``; ``None`` for another model
            or an attached server.
        engine: the interpreter that runs vLLM and the vLLM it has installed (``None`` when
            attached); ``version`` is what the server itself reports.
        cpu_priority: what was lowered once healthy (``server.priority``):
            ``{"engine_core": PriorityChange, "session": PriorityChange}`` as dicts, a key
            only for what the config asked; ``None`` when attached.
        host: where the server runs as seen from here (:class:`ServerHost`): whether it is
            this machine, and which of its cores the server computes on.
    """

    url: str
    model_name: str
    capacity: KVCapacity | None
    version: str
    pid: int | None = None
    log_path: Path | None = None
    argv: list[str] = field(default_factory=list)
    startup_s: float | None = None
    model_variant: dict[str, str] | None = None
    engine: Engine | None = None
    capacity_error: str | None = None
    cpu_priority: dict[str, object] | None = None
    host: ServerHost | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def describe(self) -> dict[str, object]:
        """JSON-ready facts about the server (written to the run directory)."""
        return {
            "url": self.url,
            "model_name": self.model_name,
            "version": self.version,
            "pid": self.pid,
            "argv": self.argv,
            "startup_s": self.startup_s,
            "capacity": asdict(self.capacity) if self.capacity else None,
            **({"capacity_error": self.capacity_error} if self.capacity_error else {}),
            "model_variant": self.model_variant,
            "engine": self.engine.as_dict() if self.engine else None,
            "cpu_priority": self.cpu_priority,
            "host": self.host.as_dict() if self.host else None,
            "env": {k: os.environ[k] for k in _ENV_TO_RECORD if k in os.environ},
        }

    def exit_code(self) -> int | None:
        """The owned server's exit code if it has exited, else ``None`` (also when attached)."""
        return self._proc.poll() if self._proc is not None else None

    def detach(self) -> None:
        """Give up ownership: the server keeps running after this process exits."""
        self._proc = None

    def stop(self, grace_s: float | None = None) -> None:
        """Stop an owned server's whole process group and check it and its port are gone.

        ``grace_s`` (s between SIGTERM and SIGKILL) defaults to :data:`READY_GRACE_S` for a
        server that became ready and :data:`UNREADY_GRACE_S` for one that never did: it has
        no request to finish, and vLLM part-way through its start was seen ignoring SIGTERM
        for the whole 15 s, so a Ctrl-C during start-up would wait that long for nothing.

        Raises:
            RuntimeError: processes of the group survived SIGKILL, or the port is still bound.
        """
        if self._proc is None:
            return
        if grace_s is None:
            grace_s = READY_GRACE_S if self.startup_s is not None else UNREADY_GRACE_S
        result = stop_group(self._proc.pid, grace_s=grace_s, reap=self._proc.poll)
        self._proc = None
        if not result.group_gone:
            raise RuntimeError(
                f"vLLM process group {self.pid} survived SIGKILL: {', '.join(result.survivors)}"
            )
        deadline = time.monotonic() + 5
        while not port_is_free(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not port_is_free(self.port):
            raise RuntimeError(f"port {self.port} still bound after stopping vLLM")


#: Seconds between SIGTERM and SIGKILL for a server that became ready (it drains its requests).
READY_GRACE_S = 15.0
#: The same for a server stopped before it was ready (an interrupted or failed start).
UNREADY_GRACE_S = 3.0

_EXCEPTION_RE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$")
_LOG_PREFIX_RE = re.compile(r"^(?:\(\w+ pid=\d+\) )?(\w+) [\d-]+ [\d:]+ \[[^\]]+\] ")
#: Wrappers that re-raise the real cause further down the log; never the answer.
_WRAPPERS = ("Engine core initialization failed", "resource_tracker")


def likely_cause(log_text: str) -> str:
    """The root cause of a failed start: the first exception line of the log.

    vLLM's engine core logs the real error first (e.g. ``ValueError: To serve at least one
    request ... KV cache is needed, which is larger than the available KV cache memory``);
    the API server then re-raises a generic wrapper, which is skipped. Argument errors
    (``api_server.py: error: ...``) are found too.
    """
    for raw in log_text.splitlines():
        prefix = _LOG_PREFIX_RE.match(raw.strip())
        if prefix and prefix.group(1) in ("DEBUG", "INFO", "WARNING"):
            continue  # e.g. the ulimit warning quotes "OSError: ..." as advice
        line = raw.strip()[prefix.end() :] if prefix else raw.strip()
        if any(w in line for w in _WRAPPERS):
            continue
        match = _EXCEPTION_RE.search(line)
        if match or ": error: " in line:
            return line
    return "no error line found in the log"


async def _get_json(client: httpx.AsyncClient, url: str) -> object | None:
    """The JSON answer of ``GET url``; ``None`` when there is none (:func:`_json_or_why`)."""
    return (await _json_or_why(client, url))[0]


def _timeout_s(client: httpx.AsyncClient) -> float | None:
    """The read timeout (s) of ``client``'s requests."""
    return client.timeout.read


async def _json_or_why(client: httpx.AsyncClient, url: str) -> tuple[object | None, str | None]:
    """(the JSON answer of ``GET url``, ``None``), or (``None``, why there is none in words:
    ``did not answer within 10 s``, ``answered HTTP 404``, ``answered with no JSON``, a
    failed connection described)."""
    try:
        response = await get_bounded(client, url, CONTROL_MAX_BYTES)
    except httpx.TimeoutException:
        return None, f"did not answer within {_timeout_s(client):g} s"
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: an answer over the bound
        return None, f"failed: {describe_exception(exc)}"
    if response.status_code != 200:
        return None, f"answered HTTP {response.status_code}"
    try:
        return response.json(), None
    except ValueError:  # a server that answers garbage
        head = " ".join(response.text[:60].split())
        return None, f"answered with no JSON ({len(response.content)} bytes: {head!r})"


class CapacityUnknownError(RuntimeError):
    """The KV capacity could be read neither from ``/metrics`` nor from the log; the message
    says why for each source (HTTP status, redirect target, missing family, …)."""


def _metrics_problem(url: str, response: httpx.Response) -> str | None:
    """Why ``response`` (to ``GET url/metrics``) carries no KV capacity; ``None`` if it does."""
    if response.is_redirect:
        target = response.headers.get("location", "?")
        return (
            f"GET {url}/metrics answered HTTP {response.status_code} redirecting to {target} "
            "(not followed: metrics are read where the server is)"
        )
    if response.status_code != 200:
        return f"GET {url}/metrics answered HTTP {response.status_code}"
    try:
        problem = cache_config_problem(response.text)
    except ValueError as exc:  # not exposition format (an HTML page, another app)
        problem = f"the page is not Prometheus exposition text ({exc})"
    if problem is None:
        return None
    kind = response.headers.get("content-type", "no content-type")
    return f"GET {url}/metrics ({kind}, {len(response.content)} bytes): {problem}"


async def read_capacity(client: httpx.AsyncClient, url: str, log_path: Path | None) -> KVCapacity:
    """KV capacity from ``/metrics`` (``vllm:cache_config_info``), else from the log line.

    Raises:
        CapacityUnknownError: neither gives it; the message says why for each.
    """
    try:
        response = await get_bounded(client, f"{url}/metrics", METRICS_MAX_BYTES)
    except httpx.TimeoutException:
        why = (
            f"the server's /metrics ({url}/metrics) did not answer within {_timeout_s(client):g} s"
        )
    except httpx.HTTPError as exc:
        why = f"GET {url}/metrics failed: {describe_exception(exc)}"
    else:
        problem = _metrics_problem(url, response)
        if problem is None:
            found = capacity_from_metrics(response.text)
            assert found is not None
            return found
        why = problem
    if log_path is not None and log_path.exists():
        found = capacity_from_log(log_path.read_text(errors="replace"))
        if found is not None:
            return found
        why += f"; and {log_path} has no 'KV cache size: N tokens' line"
    raise CapacityUnknownError(why)


async def _capacity_or_why(
    client: httpx.AsyncClient, url: str, log_path: Path | None
) -> tuple[KVCapacity | None, str | None]:
    try:
        return await read_capacity(client, url, log_path), None
    except CapacityUnknownError as exc:
        return None, str(exc)


async def _wait_healthy(
    proc: subprocess.Popen[bytes],
    url: str,
    log_path: Path,
    timeout_s: float,
    on_status: StatusCallback | None,
) -> None:
    """Wait until vLLM at ``url`` is healthy (``server.net.health.wait_healthy``), racing its
    process; ``on_status`` gets the log's last line at most once a second.

    Raises:
        ServerStartError: vLLM exited or was not healthy within ``timeout_s`` seconds; the
            message names the likely cause and quotes the end of its log.
    """
    last_status = -1.0

    def on_wait(elapsed_s: float) -> None:
        nonlocal last_status
        if on_status is not None and elapsed_s - last_status >= 1.0:
            last_status = elapsed_s
            on_status(elapsed_s, " ".join(last_lines(log_path, 1)))

    try:
        await wait_healthy(url, timeout_s=timeout_s, exited=proc.poll, on_wait=on_wait)
    except NotHealthy as exc:
        tail, cause = log_tail(log_path, 60), likely_cause(read_log(log_path))
        if exc.exit_code is not None:
            raise ServerStartError(
                f"vLLM exited with code {exc.exit_code} after {exc.elapsed_s:.0f} s "
                f"while starting.\nLikely cause: {cause}\n--- last log lines ---\n{tail}"
            ) from None
        raise ServerStartError(
            f"vLLM was not healthy after {timeout_s:.0f} s.\n"
            f"Last error-looking line: {cause}\n--- last log lines ---\n{tail}"
        ) from None


async def _model_paths(
    config: ServerConfig, decision: VariantDecision | None
) -> tuple[str, str | None]:
    """The model's path, and its draft's (``None`` without one): the embedded model's variant
    and its draft are built on first use, off the loop (the build blocks for seconds)."""
    if decision is None:
        return str(config.model), None
    model_path = str(await asyncio.to_thread(ensure_embedded_model, decision.variant))
    draft_path = None
    if config.draft is not None:  # built for the target's variant
        draft = config.draft.spec()
        draft_path = str(await asyncio.to_thread(ensure_draft_model, draft, decision.variant))
    return model_path, draft_path


async def _learn_started(server: RunningServer, config: ServerConfig, pid: int) -> None:
    """Once healthy: the server's host facts, its lowered CPU priorities (as configured), its
    KV capacity (or why it is unknown) and its vLLM version, into ``server``."""
    # /proc walks, off the loop: a replica restarts mid-phase on the sending loop.
    server.host = await asyncio.to_thread(ServerHost.of_process, pid)
    server.cpu_priority = {}
    if config.engine_core_nice is not None:
        change = await asyncio.to_thread(lower_engine_core_priority, pid, config.engine_core_nice)
        server.cpu_priority["engine_core"] = change.as_dict()
    if config.server_group_nice is not None:
        change = await asyncio.to_thread(lower_session_priority, pid, config.server_group_nice)
        server.cpu_priority["session"] = change.as_dict()
    async with httpx.AsyncClient(timeout=10.0) as client:
        server.capacity, server.capacity_error = await _capacity_or_why(
            client, server.url, server.log_path
        )
        version = await _get_json(client, f"{server.url}/version")
    server.version = str(version.get("version", "")) if isinstance(version, dict) else ""


async def start_server(
    config: ServerConfig,
    workdir: Path,
    *,
    start_timeout_s: float = 900.0,
    on_status: StatusCallback | None = None,
    port: int | None = None,
) -> RunningServer:
    """Spawn vLLM with ``config``, wait for ``/health``, read the KV capacity.

    ``port`` reuses a known loopback port (a restarted replica keeps its URL); by default a
    free one is picked.

    The embedded model's variant (``config.model_variant``, ``auto`` resolved) and its
    draft (``config.draft``) are built on first use. The caller owns the returned server and
    must call :meth:`RunningServer.stop`. The log goes to ``workdir/vllm.log``; the command
    line to ``workdir/server.json`` once healthy.

    vLLM runs in ``config.python`` (a second engine) or this interpreter; the command line is
    adapted to that engine's release (``server.engine_flags``).

    Raises:
        ServerStartError: vLLM exited or timed out; the process group is already stopped.
        server.engines.EngineNotFoundError: the engine's interpreter has no vLLM.
        server.engine_flags.UnsupportedFlagError: the engine's release lacks a needed flag.
        OSError: a file of ``workdir`` (``vllm.log``, ``command.json``, ``server.json``)
            could not be written; its ``filename`` names it; the server is stopped.
    """
    engine = inspect_engine(config.python or sys.executable)
    decision = config.variant_decision()
    model_path, draft_path = await _model_paths(config, decision)
    port = port or free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / VLLM_LOG
    launch = adapt_command(config.command(engine.python, model_path, port, draft_path), engine)
    argv = launch.argv
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **config.env, **launch.env_set}
    for key in launch.env_unset:
        env.pop(key, None)
    workdir.mkdir(parents=True, exist_ok=True)
    _write_whole(
        workdir / COMMAND_FILE,
        json.dumps(
            {"argv": argv, "env": {**config.env, **launch.env_set}, "notes": launch.notes},
            indent=2,
        ),
    )
    started = time.monotonic()
    proc = spawn_group(argv, log_path, env)
    server = RunningServer(
        url, config.served_model_name, None, "", proc.pid, log_path, argv,
        model_variant=decision.as_dict() if decision is not None else None,
        engine=engine, _proc=proc,
    )  # fmt: skip
    try:
        await _wait_healthy(proc, url, log_path, start_timeout_s, on_status)
        server.startup_s = round(time.monotonic() - started, 2)
        await _learn_started(server, config, proc.pid)
        # Inside the try: a server whose facts cannot be written is stopped, not orphaned.
        _write_whole(workdir / SERVER_FILE, json.dumps(server.describe(), indent=2))
    except BaseException as exc:
        await asyncio.shield(asyncio.to_thread(server.stop))
        if isinstance(exc, ServerStartError):
            exc.pid = proc.pid
        raise
    return server


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` as the whole of ``path`` (``server.files.replace_whole``, which
    ``loadgen.runformat.atomic`` uses for the rest of a run). An ``OSError`` names ``path``
    (its ``filename``), so the load generator reports it as a failed write of the run."""

    def produce(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    try:
        replace_whole(path, produce)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _model_name(models: object) -> str | None:
    """The first model's id in a ``/v1/models`` answer (``{"data": [{"id": …}, …]}``);
    ``None`` when it lists none or is not of that shape."""
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    name = first.get("id") if isinstance(first, dict) else None
    return str(name) if isinstance(name, str | int) and str(name) else None


async def attach(url: str) -> RunningServer:
    """Wrap an already running server at ``url`` (not owned: never stopped by us).

    Raises:
        ServerStartError: ``/health`` or ``/v1/models`` does not answer.
    """
    url = url.rstrip("/")
    async with httpx.AsyncClient(timeout=10.0) as client:
        health = await check_health(client, url, 10.0)
        if health.status is None:
            # a timeout in words ("no answer within 10 s"), else the failed connection
            timed_out = (health.problem or "").startswith("no answer")
            raise ServerStartError(
                f"cannot reach {url}/health: {health.problem if timed_out else health.cause}"
            )
        if not health.ok:
            raise ServerStartError(f"{url}/health answered {health.status}")
        models, why = await _json_or_why(client, f"{url}/v1/models")
        if why is not None:
            raise ServerStartError(f"{url}/v1/models {why}")
        name = _model_name(models)
        if name is None:
            raise ServerStartError(f"{url}/v1/models lists no model")
        capacity, capacity_error = await _capacity_or_why(client, url, None)
        version = await _get_json(client, f"{url}/version")
    return RunningServer(
        url,
        name,
        capacity,
        str(version.get("version", "")) if isinstance(version, dict) else "",
        capacity_error=capacity_error,
        host=await asyncio.to_thread(ServerHost.of_url, url),
    )
