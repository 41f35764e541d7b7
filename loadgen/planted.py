"""Plans of a gate's self-test (``loadgen gate SCENARIO --self-test F``): every case sent through
the project's gateway, with a planted slowdown on the candidate's.

Both gates of a self-test run the baseline's vLLM on both sides, each case behind a gateway, so
the extra hop is the same on both sides; the planted gate's candidate gateways hold every
answer's first token by ``--slowdown F`` with ``--slowdown-scope first-token``
(``gateway.proxy.pace``: TTFT exactly (1 + F)× the server's, the later tokens at their arrival
once it is out, so each answer ends when the server's does). Stretching every gap, or even
shifting the stream by the first token's hold, lengthens each request of a closed loop, lowers
the load the server sees and shortens its own TTFT, which takes back part of the slowdown from
the very metric it was planted in. A case that already has a gateway
keeps it, with the slowdown added to its arguments; a case with a third-party proxy (nginx,
vllm-router) or with several replicas and no relay (a gateway in front would route over
replicas the scenario keeps out of the load) is refused: :func:`behind_gateway` raises, and the
self-test checks the scenario's nominal plan before any run (``loadgen.cli.gate_self_test``).
"""

from __future__ import annotations

from scenarios.plan import CaseSpec, GatewaySpec, Plan

#: The gateway's flag of the delay injector (``gateway.config.GatewayConfig.slowdown``).
SLOWDOWN_FLAG = "--slowdown"
#: What the planted slowdown slows: the first token alone (module docstring).
SLOWDOWN_SCOPE = ("--slowdown-scope", "first-token")


class SelfTestPlanError(ValueError):
    """A case the self-test cannot put behind a slowed gateway (one line, naming it)."""


def case_behind_gateway(case: CaseSpec, slowdown: float) -> CaseSpec:
    """``case`` sent through a gateway holding its answers by ``slowdown`` (a fraction ≥ 0;
    0 adds no flag: the hop alone).

    Raises:
        SelfTestPlanError: the case has a third-party proxy, replicas without a relay, or a
            gateway that already has a slowdown.
    """
    if case.proxy is not None:
        raise SelfTestPlanError(
            f"case {case.name} is sent through {case.proxy.kind}: the self-test puts the "
            "project's gateway in front of every case and cannot stack it on another proxy"
        )
    gateway = case.gateway
    if gateway is None and case.replicas > 1:
        raise SelfTestPlanError(
            f"case {case.name} has {case.replicas} replicas and no relay: a gateway in front "
            "would route over replicas the scenario keeps out of its load"
        )
    gateway = gateway or GatewaySpec()
    if SLOWDOWN_FLAG in gateway.extra_args:
        raise SelfTestPlanError(f"case {case.name}: its gateway already has {SLOWDOWN_FLAG}")
    planted = (SLOWDOWN_FLAG, str(slowdown), *SLOWDOWN_SCOPE) if slowdown > 0 else ()
    args = gateway.extra_args + planted
    return case.model_copy(update={"gateway": gateway.model_copy(update={"extra_args": args})})


def behind_gateway(plan: Plan, slowdown: float) -> Plan:
    """Every case of ``plan`` through :func:`case_behind_gateway`.

    Raises:
        SelfTestPlanError: a case cannot be put behind the gateway (its message names it).
    """
    cases = tuple(case_behind_gateway(c, slowdown) for c in plan.cases)
    return plan.model_copy(update={"cases": cases})


def side_transforms(slowdown: float) -> dict[str, float]:
    """The gateway slowdown of each side of a planted gate: 0 on the baseline, ``slowdown``
    on the candidate (an A/A gate is ``side_transforms(0)``)."""
    return {"baseline": 0.0, "candidate": slowdown}
