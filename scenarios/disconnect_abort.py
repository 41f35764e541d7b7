"""disconnect-abort: does a client disconnect free the server, directly and through a proxy?

Streaming requests with long outputs; the client closes the connection after a few tokens.
Paths (cases, one shared vLLM start): directly to vLLM; through the project's gateway;
through the gateway with cancellation propagation off (the misbehaving proxy); and through
the proxies people deploy in front of vLLM: nginx as a streaming proxy (its defaults, and
with ``proxy_ignore_client_abort on``) and vllm-router. Each path's expected outcome, and
where that expectation comes from, is in :data:`PATHS`.

See docs/scenarios/disconnect-abort.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.arrivals import AllAtOnce
from scenarios.base import Scenario
from scenarios.checks import Check, CheckSpec
from scenarios.common import (
    MAX_CONCURRENCY,
    MAX_TOKENS,
    MAX_WAIT_S,
    HttpUrlText,
    RunParams,
    SizeText,
)
from scenarios.plan import CaseSpec, GatewaySpec, PhaseSpec, Plan, ProxySpec
from scenarios.values import list_items
from scenarios.workloads import UniquePrompts
from server.capacity import KVCapacity
from server.sizes import parse_size

Expect = Literal["frees", "orphans"]


@dataclass(frozen=True)
class PathSpec:
    """One way from the client to vLLM: what sits between (``route``: none, the project's
    gateway, or a third-party proxy), the expected outcome of a mid-stream disconnect
    (``frees``: the server drops the request; ``orphans``: it generates on for nobody), and
    the source of that expectation."""

    route: GatewaySpec | ProxySpec | None
    expect: Expect
    label: str
    source: str


PATHS: dict[str, PathSpec] = {
    "direct": PathSpec(
        None, "frees", "client → vLLM",
        "vLLM's AsyncLLM.generate (vllm/v1/engine/async_llm.py) aborts the request when "
        "its output stream is cancelled or closed, as the HTTP server does when the "
        "streaming client disconnects",
    ),
    "gateway": PathSpec(
        GatewaySpec(propagate_cancellation=True), "frees", "client → gateway → vLLM",
        "the gateway closes its upstream request when the client goes (docs/gateway.md)",
    ),
    "broken-proxy": PathSpec(
        GatewaySpec(propagate_cancellation=False), "orphans",
        "client → gateway (no cancellation) → vLLM",
        "--no-propagate-cancellation reads the upstream stream to its end (docs/gateway.md)",
    ),
    "nginx": PathSpec(
        ProxySpec(kind="nginx"), "frees", "client → nginx (streaming, defaults) → vLLM",
        "nginx docs, proxy_ignore_client_abort (default off): the connection with the "
        "proxied server is closed when the client closes its connection",
    ),
    "nginx-ignore-abort": PathSpec(
        ProxySpec(kind="nginx", ignore_client_abort=True), "frees",
        "client → nginx (proxy_ignore_client_abort on) → vLLM",
        "the directive keeps the upstream only while nginx has nothing to write; mid-stream "
        "the next relayed event fails on the closed client connection, and nginx then "
        "finalizes the upstream request unless it caches or stores the response "
        "(ngx_http_upstream.c, ngx_http_upstream_process_request: downstream_error)",
    ),
    "vllm-router": PathSpec(
        ProxySpec(kind="vllm-router"), "frees", "client → vllm-router → vLLM",
        "vllm-router 0.1.17 src/routers/http/router.rs: the task relaying the upstream "
        "stream stops when its send to the dropped client body fails, dropping the "
        "upstream response (its connection closes)",
    ),
}  # fmt: skip


class DisconnectFreesServer(CheckSpec):
    """After the last client disconnect, the server drops the abandoned requests.

    Passes when ``num_requests_running`` is back to (baseline + requests still open at the
    client) within ``within_s`` seconds of the last disconnect, and the generation tokens no
    client received are at most ``max_wasted_fraction`` of what the abandoned requests would
    have generated had they run to completion.
    """

    kind: Literal["disconnect_frees_server"] = "disconnect_frees_server"
    families: ClassVar[tuple[str, ...]] = ("num_requests_running", "generation_tokens")
    phase: str
    within_s: float = Field(default=1.0, gt=0)
    max_wasted_fraction: float = Field(default=0.1, ge=0)
    #: Why this path is expected to free the server (the source: a doc, a function).
    expected_because: str = ""


class OrphansRunOn(CheckSpec):
    """The abandoned requests keep running (a proxy that swallows disconnects): at least
    ``min_wasted_fraction`` of their remaining tokens are generated for nobody."""

    kind: Literal["orphans_run_on"] = "orphans_run_on"
    families: ClassVar[tuple[str, ...]] = ("generation_tokens",)
    phase: str
    min_wasted_fraction: float = Field(default=0.8, ge=0)
    #: Why this path is expected to leave orphans (the source: a doc, a function).
    expected_because: str = ""


class DisconnectAbortParams(RunParams):
    """Knobs of disconnect-abort (each becomes a ``--flag``)."""

    paths: str = Field(
        default="direct,gateway,broken-proxy", description=f"Cases, from: {', '.join(PATHS)}."
    )
    cache: SizeText = Field(default="1GiB", description="KV cache size (1GiB = 2^30 bytes).")
    url: HttpUrlText | None = Field(default=None, description="Attach to this running server.")
    requests: int = Field(
        default=8,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Streaming requests, all sent at once.",
    )
    prompt_tokens: int = Field(
        default=256, gt=0, le=MAX_TOKENS, description="Prompt length (tokens), unique."
    )
    output_tokens: int = Field(
        default=512, gt=1, le=MAX_TOKENS, description="Requested output tokens."
    )
    disconnect_after_tokens: int = Field(
        default=32,
        gt=0,
        le=MAX_TOKENS,
        description="Client disconnects after receiving this many tokens.",
    )
    disconnect_fraction: float = Field(
        default=1.0, gt=0, le=1, description="Fraction of requests that disconnect."
    )
    free_within_s: float = Field(
        default=1.0,
        gt=0,
        le=MAX_WAIT_S,
        description="Seconds allowed from last disconnect to a free server.",
    )
    max_wasted_fraction: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Wasted tokens allowed (fraction of the orphan budget).",
    )
    orphan_min_wasted_fraction: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Broken proxy: wasted fraction that shows orphans ran on.",
    )
    idle_timeout_s: float = Field(
        default=300.0,
        gt=0,
        le=MAX_WAIT_S,
        description="Max wait for orphaned work to finish (s).",
    )

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: str) -> str:
        names = list_items(value, "path")
        choose = f"choose from {', '.join(PATHS)}"
        if not names:
            raise ValueError(f"no path given; {choose}")
        unknown = [p for p in names if p not in PATHS]
        if unknown:
            raise ValueError(f"unknown path(s) {unknown}; {choose}")
        twice = sorted({p for p in names if names.count(p) > 1})
        if twice:  # one case directory a path: a second would mix its records into the first
            raise ValueError(f"path(s) {twice} given more than once")
        return ",".join(names)

    @model_validator(mode="after")
    def _consistent(self) -> DisconnectAbortParams:
        self.check_fits(self.prompt_tokens, self.output_tokens)
        if self.disconnect_after_tokens >= self.output_tokens:
            raise ValueError("disconnect_after_tokens must be below output_tokens")
        if int(self.requests * self.disconnect_fraction) < 1:  # UniquePrompts.disconnects
            raise ValueError(
                f"disconnect_fraction {self.disconnect_fraction:g} × requests {self.requests} "
                f"= {self.requests * self.disconnect_fraction:g}: no request disconnects, "
                "nothing to measure"
            )
        return self


class DisconnectAbort(Scenario[DisconnectAbortParams]):
    name: ClassVar[str] = "disconnect-abort"
    summary: ClassVar[str] = (
        "Clients disconnect mid-stream: directly, through the gateway, through a proxy that "
        "swallows disconnects, or through nginx or vllm-router. How fast is the server free, "
        "and how much is wasted?"
    )
    Params = DisconnectAbortParams

    def _case(self, p: DisconnectAbortParams, path: str) -> CaseSpec:
        phase = PhaseSpec(
            name=f"abort-{path}",
            workload=UniquePrompts(
                prompt_tokens=p.prompt_tokens,
                requests=p.requests,
                output_tokens=p.output_tokens,
                disconnect_after_tokens=p.disconnect_after_tokens,
                disconnect_fraction=p.disconnect_fraction,
            ),
            arrival=AllAtOnce(),
            settle_s=p.settle_s,
            settle_until_idle_s=p.idle_timeout_s,
        )
        server = None if p.url else p.server(parse_size(p.cache))
        route = PATHS[path].route
        return CaseSpec(
            name=path,
            server=server,
            url=p.url,
            gateway=route if isinstance(route, GatewaySpec) else None,
            proxy=route if isinstance(route, ProxySpec) else None,
            label=PATHS[path].label,
            phases=(phase,),
        )

    def sizing_case(self, p: DisconnectAbortParams) -> CaseSpec:
        return self._case(p, p.paths.split(",")[0])

    def plan(self, p: DisconnectAbortParams, capacity: KVCapacity) -> Plan:
        cases = [self._case(p, path) for path in p.paths.split(",")]
        checks: list[Check] = []
        for case in cases:
            phase = case.phases[0].name
            if PATHS[case.name].expect == "orphans":
                checks.append(
                    OrphansRunOn(
                        case=case.name,
                        phase=phase,
                        min_wasted_fraction=p.orphan_min_wasted_fraction,
                        expected_because=PATHS[case.name].source,
                    )
                )
            else:
                checks.append(
                    DisconnectFreesServer(
                        case=case.name,
                        phase=phase,
                        within_s=p.free_within_s,
                        max_wasted_fraction=p.max_wasted_fraction,
                        expected_because=PATHS[case.name].source,
                    )
                )
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing={
                "capacity_tokens": capacity.tokens,
                "requests": p.requests,
                "orphan_token_budget": p.requests
                * p.disconnect_fraction
                * (p.output_tokens - p.disconnect_after_tokens),
            },
            cases=tuple(cases),
            phases=(),
            checks=tuple(checks),
            **p.plan_fields(),
        )
