"""disconnect-abort on the real embedded vLLM (the session's shared 1 GiB server).

Four streaming requests of 128 + 256 tokens; each client disconnects after 16 tokens. Directly
and through the gateway the server drops them within about a second; through the gateway with
propagation off they run on to their 256 tokens, generating 4 × 240 tokens for nobody.
Through the real proxies (nginx as a streaming proxy, with and without
``proxy_ignore_client_abort on``, and vllm-router; ``make proxies`` installs them) the
server is free within a second too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loadgen.proxies import ProxyNotInstalledError, find_proxy
from scenarios.plan import ProxySpec
from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


def _abort_run(server: SharedServer, tmp_path_factory: pytest.TempPathFactory, *paths: str) -> Path:
    """The module's workload (4 streams, 128 + 256 tokens, disconnect after 16) on the shared
    server, through the scenario's default paths or ``--paths`` ``paths``."""
    return run_scenario(
        tmp_path_factory, "disconnect-abort",
        "--url", server.url,
        *(("--paths", ",".join(paths)) if paths else ()),
        "--requests", "4",
        "--prompt-tokens", "128",
        "--output-tokens", "256",
        "--disconnect-after-tokens", "16",
        "--settle-s", "0.6",
    )  # fmt: skip


@pytest.fixture(scope="module")
def abort_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _abort_run(server_1gib, tmp_path_factory)


def _rows(run: Path) -> dict[str, dict]:
    report = read_report(run)
    return {r["case"]: r for r in report["details"]["rows"]}


def test_all_disconnect_verdicts_pass(abort_run: Path) -> None:
    report = read_report(abort_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    assert report["verdict_summary"] == {"passed": 3, "failed": 0, "undecided": 0}


def test_each_client_disconnected_after_exactly_16_tokens(abort_run: Path) -> None:
    for row in _rows(abort_run).values():
        assert row["disconnected"] == 4
        assert row["received_tokens_at_disconnect"] == [16]


def test_propagated_disconnects_free_the_server_within_a_second(abort_run: Path) -> None:
    rows = _rows(abort_run)
    for case in ("direct", "gateway"):
        assert rows[case]["time_to_free_s"] is not None and rows[case]["time_to_free_s"] <= 1.0
        assert rows[case]["wasted_tokens"] <= 0.1 * rows[case]["orphan_budget_tokens"]  # 96


def test_the_broken_proxy_leaves_orphans_generating_for_nobody(abort_run: Path) -> None:
    row = _rows(abort_run)["broken-proxy"]
    assert row["orphan_budget_tokens"] == 960  # 4 × (256 − 16)
    assert row["wasted_tokens"] >= 0.8 * 960
    assert row["zombie_s"] > 1.0
    assert row["server_idle_after"] is True  # the run waited for the orphans to finish


def test_gateway_cases_kept_the_gateway_log_and_validate_passes(abort_run: Path) -> None:
    assert "gateway listening on" in (abort_run / "cases" / "gateway" / "gateway.log").read_text()
    assert loadgen("validate", str(abort_run), timeout=120).returncode == 0


PROXY_PATHS = ("nginx", "nginx-ignore-abort", "vllm-router")


@pytest.fixture(scope="module")
def proxy_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    for spec in (ProxySpec(kind="nginx"), ProxySpec(kind="vllm-router")):
        try:
            find_proxy(spec)
        except ProxyNotInstalledError as exc:
            if os.environ.get("CI"):  # `make test` installs both: missing on CI is a failure
                pytest.fail(str(exc))
            pytest.skip(str(exc))
    return _abort_run(server_1gib, tmp_path_factory, *PROXY_PATHS)


def test_every_real_proxy_frees_the_server_within_a_second(proxy_run: Path) -> None:
    report = read_report(proxy_run)
    assert report["verdict_summary"] == {"passed": 3, "failed": 0, "undecided": 0}
    rows = _rows(proxy_run)
    for case in PROXY_PATHS:
        assert rows[case]["disconnected"] == 4
        assert rows[case]["received_tokens_at_disconnect"] == [16]
        assert rows[case]["time_to_free_s"] is not None and rows[case]["time_to_free_s"] <= 1.0
        assert rows[case]["wasted_tokens"] <= 96  # 10 % of 4 × (256 − 16)


def test_each_proxy_ran_with_its_own_config_and_the_run_validates(proxy_run: Path) -> None:
    cases = proxy_run / "cases"
    assert "proxy_ignore_client_abort off;" in (cases / "nginx/proxy/nginx.conf").read_text()
    ignoring = (cases / "nginx-ignore-abort/proxy/nginx.conf").read_text()
    assert "proxy_ignore_client_abort on;" in ignoring
    assert (cases / "vllm-router/proxy/vllm-router.log").exists()
    expected = {p["case"]: p["expect"] for p in read_report(proxy_run)["details"]["paths"]}
    assert expected == dict.fromkeys(PROXY_PATHS, "frees")
    assert loadgen("validate", str(proxy_run), timeout=120).returncode == 0


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    abort_run: Path, tmp_path: Path
) -> None:
    check_report_page(abort_run, tmp_path)
