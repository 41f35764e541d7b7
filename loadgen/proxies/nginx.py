"""nginx as a streaming reverse proxy in front of a case's vLLM replicas: its config and its
process.

The config is what a streaming deployment writes: HTTP/1.1 to a keep-alive upstream pool and
``proxy_buffering off`` so each SSE event is relayed as it arrives; everything else is nginx's
default, ``proxy_ignore_client_abort off`` included, unless ``ignore_client_abort`` asks for
``on``. nginx runs in the foreground as our own process (``daemon off; master_process off``),
never as a service, with every file it writes (pid, logs, temp files) in its work directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from loadgen.proxies.ready import is_executable_file
from loadgen.proxies.relay import RelayCommand, RelayKind
from loadgen.runformat.layout import NGINX_CONF, NGINX_ERROR_LOG, NGINX_LOG, PROXY_DIR
from server.process import free_loopback_port

#: Where Debian's package puts the binary (``/usr/sbin`` is not on every user's PATH).
SBIN_PATH = "/usr/sbin:/usr/local/sbin"
#: Names the nginx binary explicitly.
NGINX_ENV = "SERVING_TESTBED_NGINX"


def find_nginx() -> str | None:
    """Path of the nginx binary: ``$SERVING_TESTBED_NGINX``, else ``PATH``, else ``/usr/sbin``
    and ``/usr/local/sbin``; ``None`` when there is none."""
    named = os.environ.get(NGINX_ENV)
    if named:
        return named if is_executable_file(named) else None
    return shutil.which("nginx") or shutil.which("nginx", path=SBIN_PATH)


def upstream_address(url: str) -> tuple[str, str]:
    """``(scheme, host:port)`` of an upstream base URL for an nginx ``upstream`` block: the
    port made explicit (80 or 443 by scheme), an IPv6 host in brackets.

    Raises:
        ValueError: not an http(s) URL with a host, or one with a path or credentials
            (nginx would drop them).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"nginx needs an http(s) upstream URL with a host, not {url!r}")
    if parts.username is not None or parts.path.strip("/") or parts.query:
        raise ValueError("nginx is put in front of a server's base URL (no path, no credentials)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, f"{host}:{port}"


def nginx_config(
    workdir: Path,
    listen_port: int,
    upstream_url: str | Sequence[str],
    *,
    ignore_client_abort: bool = False,
    worker_connections: int = 4096,
) -> Path:
    """Write ``workdir/nginx.conf``: a streaming proxy on ``127.0.0.1:listen_port`` in front
    of ``upstream_url`` (``http://host:port``, or several: one upstream pool, nginx's
    round-robin); returns its path.

    One worker process, no access log, keep-alive upstream connections (as a gateway holds
    them), ``proxy_read_timeout 3600s`` (a long generation may pause longer than nginx's 60 s
    default between events while it waits in vLLM's queue). ``ignore_client_abort`` adds
    ``proxy_ignore_client_abort on``.

    Raises:
        ValueError: an upstream is not a base URL nginx can proxy to
            (:func:`upstream_address`), or the upstreams mix http and https.
        OSError: the file cannot be written.
    """
    urls = [upstream_url] if isinstance(upstream_url, str) else list(upstream_url)
    addresses = [upstream_address(url) for url in urls]
    schemes = {scheme for scheme, _ in addresses}
    if len(schemes) != 1:
        raise ValueError("nginx needs upstreams of one scheme (all http or all https)")
    scheme = schemes.pop()
    servers = " ".join(f"server {host_port};" for _, host_port in addresses)
    abort = "on" if ignore_client_abort else "off"
    conf = f"""worker_processes 1;
daemon off;
master_process off;
pid {workdir}/nginx.pid;
error_log {workdir}/{NGINX_ERROR_LOG} warn;
events {{ worker_connections {worker_connections}; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    keepalive_requests 1000000;
    upstream vllm {{ {servers} keepalive 512; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{listen_port};
        location / {{
            proxy_pass {scheme}://vllm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
            proxy_ignore_client_abort {abort};
        }}
    }}
}}
"""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / NGINX_CONF
    path.write_text(conf, encoding="utf-8")
    return path


def nginx_argv(binary: str, workdir: Path, conf: Path) -> list[str]:
    """nginx in the foreground with ``conf``; ``-p`` and ``-e`` keep it from touching
    /var/log/nginx before it reads the config (its errors go to ``workdir/error.log``)."""
    return [binary, "-p", str(workdir), "-e", str(workdir / NGINX_ERROR_LOG), "-c", str(conf)]


class NginxKind(RelayKind):
    """nginx (``scenarios.plan.ProxySpec`` of kind ``nginx``), its files in the case's
    ``proxy/`` directory: ``nginx.conf``, ``error.log``, ``nginx.log``."""

    name: ClassVar[str] = "nginx"
    env_var: ClassVar[str | None] = NGINX_ENV
    install_hint: ClassVar[str] = (
        "nginx is not installed: `make proxies` installs it (Debian's package, as root), "
        "or put an nginx binary on PATH or in $SERVING_TESTBED_NGINX"
    )

    def find(self) -> str | None:
        return find_nginx()

    def command(
        self, spec: Any, binary: str, upstreams: Sequence[str], workdir: Path
    ) -> RelayCommand:
        port = free_loopback_port()
        conf = nginx_config(workdir, port, upstreams, ignore_client_abort=spec.ignore_client_abort)
        log = workdir / NGINX_LOG
        argv = nginx_argv(binary, workdir, conf)
        url = f"http://127.0.0.1:{port}"
        return RelayCommand(argv, dict(os.environ), url, log, [workdir / NGINX_ERROR_LOG, log])

    def workdir(self, case_dir: Path) -> Path:
        return case_dir / PROXY_DIR
