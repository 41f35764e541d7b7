"""disconnect-abort's paths: what each puts between client and vLLM, what each is expected to
do on a mid-stream disconnect, and that the plan carries why."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from analysis.load import RunData
from analysis.reports.disconnect_abort.report import path_expectations
from loadgen.runformat.rows import RunInfo
from scenarios.disconnect_abort import (
    PATHS,
    DisconnectAbort,
    DisconnectAbortParams,
    DisconnectFreesServer,
    OrphansRunOn,
)
from scenarios.plan import GatewaySpec, Plan, ProxySpec
from server.capacity import KVCapacity

CAPACITY = KVCapacity(18688, 128, 146, 2**30, "test")
ALL = "direct,gateway,broken-proxy,nginx,nginx-ignore-abort,vllm-router"


def _plan(paths: str) -> Plan:
    params = DisconnectAbortParams(paths=paths, url="http://127.0.0.1:8000")
    return DisconnectAbort().plan(params, CAPACITY)


def test_each_path_puts_its_own_hop_between_client_and_vllm() -> None:
    cases = {c.name: c for c in _plan(ALL).cases}
    assert cases["direct"].gateway is None and cases["direct"].proxy is None
    assert cases["gateway"].gateway == GatewaySpec(propagate_cancellation=True)
    assert cases["broken-proxy"].gateway == GatewaySpec(propagate_cancellation=False)
    assert cases["nginx"].proxy == ProxySpec(kind="nginx", ignore_client_abort=False)
    assert cases["nginx-ignore-abort"].proxy == ProxySpec(kind="nginx", ignore_client_abort=True)
    assert cases["vllm-router"].proxy == ProxySpec(kind="vllm-router")
    assert cases["vllm-router"].gateway is None
    assert cases["nginx"].label == "client → nginx (streaming, defaults) → vLLM"


def test_only_the_broken_proxy_is_expected_to_leave_orphans() -> None:
    checks = {c.case: c for c in _plan(ALL).checks}
    assert isinstance(checks["broken-proxy"], OrphansRunOn)
    for name in ("direct", "gateway", "nginx", "nginx-ignore-abort", "vllm-router"):
        assert isinstance(checks[name], DisconnectFreesServer), name
        assert checks[name].within_s == 1.0 and checks[name].max_wasted_fraction == 0.1


def test_every_expectation_names_its_source_in_the_plan() -> None:
    plan = _plan(ALL)
    for check in plan.checks:
        assert check.expected_because == PATHS[check.case].source != ""
    assert "proxy_ignore_client_abort" in PATHS["nginx"].source
    assert "ngx_http_upstream_process_request" in PATHS["nginx-ignore-abort"].source
    assert "src/routers/http/router.rs" in PATHS["vllm-router"].source


def test_the_report_lists_each_path_with_its_expectation(tmp_path: Path) -> None:
    plan = _plan("nginx,broken-proxy")
    run = RunData(run_dir=tmp_path, plan=plan, run=RunInfo(), cases=[])
    got = [(p.case, p.label, p.expect) for p in path_expectations(run)]
    assert got == [
        ("nginx", "client → nginx (streaming, defaults) → vLLM", "frees"),
        ("broken-proxy", "client → gateway (no cancellation) → vLLM", "orphans"),
    ]


def test_an_unknown_path_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError) as caught:
        DisconnectAbortParams(paths="direct,haproxy")
    assert "unknown path(s) ['haproxy']" in str(caught.value)
    assert ALL.replace(",", ", ") in str(caught.value)


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ("nginx,nginx", "path(s) ['nginx'] given more than once"),
        ("direct,nginx, direct", "path(s) ['direct'] given more than once"),
        ("", "no path given; choose from direct, gateway"),
        (" , ", "no path given"),
    ],
)
def test_each_path_is_given_once(paths: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DisconnectAbortParams(paths=paths)
    assert message in str(caught.value)


def test_a_plan_refuses_two_cases_of_one_name() -> None:
    plan = _plan("direct,nginx")
    twice = plan.model_dump()
    twice["cases"] = [twice["cases"][0], twice["cases"][0]]
    with pytest.raises(ValidationError, match=r"case name\(s\) \['direct'\] used more than once"):
        Plan.model_validate(twice)
