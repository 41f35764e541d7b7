"""The third-party proxies a case can put in front of vLLM (``loadgen.proxies``): their
config, their command line, and the refusal, before anything starts, of one not installed."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from loadgen.cli import main
from loadgen.proxies import ProxyNotInstalledError, check_installed, find_proxy, running_proxy
from loadgen.proxies.nginx import nginx_config, upstream_address
from loadgen.proxies.vllm_router import find_vllm_router, router_argv
from scenarios.plan import CaseSpec, GatewaySpec, ProxySpec


def _executable(path: Path, script: str) -> Path:
    """Write ``script`` to ``path`` and make it executable."""
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _directives(conf: str) -> list[str]:
    return [line.strip() for line in conf.splitlines()]


def test_the_nginx_config_streams_and_leaves_client_aborts_at_nginx_default(
    tmp_path: Path,
) -> None:
    conf = nginx_config(tmp_path, 18001, "http://127.0.0.1:8000/").read_text()
    lines = _directives(conf)
    assert "listen 127.0.0.1:18001;" in lines
    assert (
        "upstream vllm { server 127.0.0.1:8000; keepalive 512; keepalive_requests 1000000; }"
        in lines
    )
    assert "proxy_buffering off;" in lines
    assert "proxy_http_version 1.1;" in lines
    assert "proxy_ignore_client_abort off;" in lines  # nginx's documented default, spelled out
    assert f"pid {tmp_path}/nginx.pid;" in lines  # nothing outside its work directory


def test_ignore_client_abort_turns_the_directive_on(tmp_path: Path) -> None:
    conf = nginx_config(tmp_path, 1, "http://127.0.0.1:2", ignore_client_abort=True).read_text()
    assert "proxy_ignore_client_abort on;" in _directives(conf)
    assert "proxy_ignore_client_abort off;" not in _directives(conf)


def test_the_router_runs_on_loopback_with_one_worker_and_no_retries() -> None:
    argv = router_argv("/bin/vllm-router", "http://127.0.0.1:8000", 9001, 9002)
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "9001"
    assert pairs["--worker-urls"] == "http://127.0.0.1:8000"
    assert pairs["--prometheus-host"] == "127.0.0.1" and pairs["--prometheus-port"] == "9002"
    assert "--disable-retries" in argv


def test_kv_aware_subscribes_to_each_workers_events() -> None:
    sources = (("http://127.0.0.1:8000", "tcp://127.0.0.1:7000"),
               ("http://127.0.0.1:8001", "tcp://127.0.0.1:7001"))  # fmt: skip
    argv = router_argv("/bin/vllm-router", [u for u, _ in sources], 9001, 9002, "kv_aware",
                       (sources, "testbed", 128))  # fmt: skip
    tail = argv[argv.index("--policy") :]
    assert tail == [
        "--policy", "kv_aware",
        "--kv-event-source", "http://127.0.0.1:8000=tcp://127.0.0.1:7000",
        "--kv-event-source", "http://127.0.0.1:8001=tcp://127.0.0.1:7001",
        "--kv-event-model", "testbed", "--kv-event-block-size", "128",
    ]  # fmt: skip
    plain = router_argv("/bin/vllm-router", "http://127.0.0.1:8000", 9001, 9002, "round_robin")
    assert not any(a.startswith("--kv-event") for a in plain)


def test_ignore_client_abort_is_refused_for_the_router() -> None:
    with pytest.raises(ValidationError, match="ignore_client_abort is an nginx setting"):
        ProxySpec(kind="vllm-router", ignore_client_abort=True)


def test_a_case_takes_a_gateway_or_a_proxy_not_both() -> None:
    with pytest.raises(ValidationError, match="a gateway or a proxy, not both"):
        CaseSpec(name="x", url="http://127.0.0.1:1", gateway=GatewaySpec(),
                 proxy=ProxySpec(kind="nginx"))  # fmt: skip


def test_a_named_executable_is_used_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    router = _executable(tmp_path / "vllm-router", "#!/bin/sh\n")
    monkeypatch.setenv("SERVING_TESTBED_VLLM_ROUTER", str(router))
    assert find_vllm_router() == str(router)
    assert find_proxy(ProxySpec(kind="vllm-router")) == str(router)
    monkeypatch.setenv("SERVING_TESTBED_VLLM_ROUTER", str(tmp_path / "absent"))
    with pytest.raises(ProxyNotInstalledError, match=r"names .*absent, which is not an executable"):
        find_proxy(ProxySpec(kind="vllm-router"))


def test_a_proxy_that_is_not_installed_is_named_with_its_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVING_TESTBED_ENGINES", str(tmp_path))  # no vllm-router venv there
    monkeypatch.delenv("SERVING_TESTBED_VLLM_ROUTER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    cases = [
        CaseSpec(name="direct", url="http://127.0.0.1:1"),
        CaseSpec(name="vllm-router", url="http://127.0.0.1:1", proxy=ProxySpec(kind="vllm-router")),
    ]
    with pytest.raises(ProxyNotInstalledError) as caught:
        check_installed(cases)
    assert str(caught.value).startswith("case vllm-router: vllm-router is not installed:")
    assert "`make proxies`" in str(caught.value)


@pytest.mark.parametrize("attach", [False, True])
def test_run_refuses_a_missing_proxy_before_any_server_or_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attach: bool
) -> None:
    monkeypatch.setenv("SERVING_TESTBED_NGINX", str(tmp_path / "no-nginx"))
    out = tmp_path / "run"
    args = ["run", "disconnect-abort", "--paths", "direct,nginx", "--out", str(out)]
    if attach:
        args += ["--url", "http://127.0.0.1:9"]  # nothing listens: it must not get that far
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "case nginx: $SERVING_TESTBED_NGINX names" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", ("http", "127.0.0.1:8000")),
        ("http://localhost/", ("http", "localhost:80")),
        ("https://127.0.0.1", ("https", "127.0.0.1:443")),
        ("http://[::1]:8000", ("http", "[::1]:8000")),
    ],
)
def test_the_upstream_block_gets_an_explicit_port(url: str, expected: tuple[str, str]) -> None:
    assert upstream_address(url) == expected


@pytest.mark.parametrize(
    "url", ["http://u:secret@127.0.0.1:8000", "http://127.0.0.1:8000/v1", "ftp://127.0.0.1"]
)
def test_an_upstream_nginx_would_mangle_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="nginx"):
        upstream_address(url)


def test_an_https_upstream_is_proxied_over_https(tmp_path: Path) -> None:
    conf = nginx_config(tmp_path, 1, "https://127.0.0.1:8443").read_text()
    assert "proxy_pass https://vllm;" in _directives(conf)


def test_a_directory_is_not_taken_for_the_proxy_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVING_TESTBED_NGINX", str(tmp_path))  # a directory has the x bit
    with pytest.raises(ProxyNotInstalledError, match="which is not an executable file"):
        find_proxy(ProxySpec(kind="nginx"))


def test_a_proxy_that_exits_at_once_is_reported_with_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _executable(
        tmp_path / "nginx", "#!/bin/sh\necho 'nginx: [emerg] unknown directive \"x\"'\nexit 3\n"
    )
    monkeypatch.setenv("SERVING_TESTBED_NGINX", str(fake))

    async def start() -> None:
        async with running_proxy(ProxySpec(kind="nginx"), "http://127.0.0.1:9", tmp_path / "p"):
            pass

    with pytest.raises(RuntimeError) as caught:
        asyncio.run(start())
    text = str(caught.value)
    assert "nginx exited with code 3 before it relayed a request" in text
    assert f"{tmp_path / 'p' / 'nginx.log'}:\nnginx: [emerg] unknown directive" in text
