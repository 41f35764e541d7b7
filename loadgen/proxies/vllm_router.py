"""vllm-router (vLLM's Rust load balancer, package ``vllm-router``) in front of a case's vLLM
replicas.

It is installed into its own virtualenv (``make proxies``: ``.engines/vllm-router/``), so its
dependencies never meet the project's, and runs as our own process on loopback. Its settings
are its defaults except: loopback ports chosen here (its Prometheus endpoint too, whose default
29000 two runs would share), a 1 s start-up health poll (default 30 s) and no retries (a
retried request would be sent to vLLM twice and counted once).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from loadgen.proxies.ready import is_executable_file
from loadgen.proxies.relay import RelayCommand, RelayKind
from loadgen.runformat.layout import PROXY_DIR, ROUTER_LOG
from server.engines import engines_root
from server.process import free_loopback_port

#: The router's own virtualenv under the engines root (``make proxies`` creates it).
VENV_NAME = "vllm-router"
#: Names the router's executable explicitly.
VLLM_ROUTER_ENV = "SERVING_TESTBED_VLLM_ROUTER"
#: Its log is a file, not a terminal (it colours it all the same: quoted logs are stripped).
ROUTER_ENV = {"NO_COLOR": "1", "RUST_LOG_STYLE": "never"}


def find_vllm_router() -> str | None:
    """Path of the ``vllm-router`` executable: ``$SERVING_TESTBED_VLLM_ROUTER``, else
    ``<engines root>/vllm-router/bin/vllm-router``, else ``PATH``; ``None`` when none."""
    named = os.environ.get(VLLM_ROUTER_ENV)
    if named:
        return named if is_executable_file(named) else None
    local = engines_root() / VENV_NAME / "bin" / "vllm-router"
    if is_executable_file(str(local)):
        return str(local)
    return shutil.which("vllm-router")


def router_argv(
    binary: str,
    upstream_url: str | Sequence[str],
    port: int,
    metrics_port: int,
    policy: str | None = None,
    kv_events: tuple[Sequence[tuple[str, str]], str | None, int | None] = ((), None, None),
) -> list[str]:
    """The command line that runs the router on ``127.0.0.1:port`` with ``upstream_url`` as
    its worker (or several, one argument each), routing with ``policy`` (its ``--policy``;
    ``None`` leaves its default, ``cache_aware``); ``kv_events`` = (worker URL, ZMQ endpoint)
    pairs, model name, block size: where ``kv_aware`` subscribes to each worker's KV-cache
    events (``--kv-event-source URL=ENDPOINT`` per worker, ``--kv-event-model``,
    ``--kv-event-block-size``)."""
    urls = [upstream_url] if isinstance(upstream_url, str) else list(upstream_url)
    chosen = ["--policy", policy] if policy is not None else []
    sources, model, block_size = kv_events
    for worker, endpoint in sources:
        chosen += ["--kv-event-source", f"{worker}={endpoint}"]
    if sources and model is not None:
        chosen += ["--kv-event-model", model]
    if sources and block_size is not None:
        chosen += ["--kv-event-block-size", str(block_size)]
    return [
        binary,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--worker-urls", *urls,
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(metrics_port),
        "--worker-startup-check-interval", "1",
        "--disable-retries",
        "--log-level", "warning",
        *chosen,
    ]  # fmt: skip


class VllmRouterKind(RelayKind):
    """vllm-router (``scenarios.plan.ProxySpec`` of kind ``vllm-router``), its log
    ``vllm-router.log`` in the case's ``proxy/`` directory."""

    name: ClassVar[str] = "vllm-router"
    env_var: ClassVar[str | None] = VLLM_ROUTER_ENV
    install_hint: ClassVar[str] = (
        "vllm-router is not installed: `make proxies` installs it into "
        ".engines/vllm-router/ (its own virtualenv, from the package index), or set "
        "$SERVING_TESTBED_VLLM_ROUTER to its executable"
    )

    def find(self) -> str | None:
        return find_vllm_router()

    def command(
        self, spec: Any, binary: str, upstreams: Sequence[str], workdir: Path
    ) -> RelayCommand:
        port = free_loopback_port()
        while (metrics_port := free_loopback_port()) == port:
            pass  # the OS may hand out the same free port twice
        log = workdir / ROUTER_LOG
        kv_events = (spec.kv_event_sources, spec.kv_event_model, spec.kv_event_block_size)
        argv = router_argv(binary, upstreams, port, metrics_port, spec.policy, kv_events)
        env = {**os.environ, **ROUTER_ENV}
        return RelayCommand(argv, env, f"http://127.0.0.1:{port}", log, [log])

    def workdir(self, case_dir: Path) -> Path:
        return case_dir / PROXY_DIR
