"""What ``loadgen run`` and ``loadgen gate`` share: one subcommand per built-in scenario, and
the checks that refuse a bad configuration before any server starts or any load is sent."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
from pydantic import BaseModel

if TYPE_CHECKING:
    from scenarios.base import Scenario
    from scenarios.plan import CaseSpec, Plan
    from server.capacity import KVCapacity


def scenarios() -> dict[str, Scenario]:
    """The built-in scenarios by name (imported on first use: ``--help`` stays quick)."""
    from scenarios.registry import SCENARIOS

    return SCENARIOS


@click.command("list")
def list_scenarios() -> None:
    """List the built-in scenarios."""
    for name, scenario in sorted(scenarios().items()):
        click.echo(f"{name:<18} {scenario.summary}")


class ScenarioGroup(click.Group):
    """A group with one subcommand per scenario (``loadgen run``, ``loadgen gate``): lists
    them, names the known ones for an unknown name, and builds each with ``scenario_command``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(scenarios())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        scenario = scenarios().get(name)
        return None if scenario is None else self.scenario_command(name, scenario)

    def scenario_command(self, name: str, scenario: Scenario) -> click.Command:
        raise NotImplementedError

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not args[0].startswith("-") and args[0] not in scenarios():
            known = ", ".join(sorted(scenarios()))
            raise click.UsageError(f"unknown scenario {args[0]!r}; known: {known}")
        return super().resolve_command(ctx, args)


def _check_cache_sizes(cases: list[CaseSpec], max_model_len: int) -> None:
    """Reject caches too small for vLLM to start with the embedded model, before any start.

    vLLM refuses to start unless the cache holds one full-length sequence
    (``max_model_len`` tokens); with the embedded model's KV bytes per token (of the chosen
    variant, 57,344 B for both) that is known here, so the error comes at once instead of
    after a 25 s failed start.
    """
    from server.sizes import format_size

    for case in cases:
        per_token = case.server.kv_bytes_per_token() if case.server is not None else None
        if case.server is None or per_token is None:
            continue  # attached, or a model whose KV geometry we do not know
        tokens = case.server.kv_cache_bytes // per_token
        if tokens < max_model_len:
            need = format_size(-(-max_model_len * per_token // 2**20) * 2**20)
            raise click.UsageError(
                f"case {case.name}: a {format_size(case.server.kv_cache_bytes)} KV cache holds "
                f"{tokens} tokens of the embedded model ({per_token:,} B each), fewer than "
                f"--max-model-len {max_model_len}; vLLM would refuse to start. "
                f"Use at least {need} or a smaller --max-model-len."
            )


def nominal_capacity(sizing: CaseSpec) -> KVCapacity:
    """The KV capacity a plan is checked against before anything starts: the sizing case's
    cache size in tokens of the embedded model's geometry (a model of unknown geometry is
    sized as if it were the embedded one), or, for a server attached by URL, a nominal
    2^20 tokens (the real one is read before the real plan is made)."""
    from server.capacity import KVCapacity
    from server.model_variant import KV_BYTES_PER_TOKEN

    if sizing.server is None:
        return KVCapacity(2**20, 16, 2**16, 0, "nominal")
    per_token = sizing.server.kv_bytes_per_token() or KV_BYTES_PER_TOKEN
    tokens = sizing.server.kv_cache_bytes // per_token
    return KVCapacity(tokens, 16, tokens // 16, sizing.server.kv_cache_bytes, "nominal")


def nominal_check(scenario: Scenario, params: BaseModel, allow_long_schedule: bool = False) -> None:
    """Build the plan against the capacity the cache size implies, before anything starts.

    Catches parameter combinations the scenario rejects without sending any load, and a
    schedule longer than the limit (``scenarios.schedule``; ``allow_long_schedule``: the
    user passed ``--allow-long-schedule``).

    Raises:
        click.UsageError: the plan cannot be made, its schedule is too long, a cache is too
            small for vLLM to start, or the engine's vLLM release cannot take a server's
            configuration.
    """
    sizing = scenario.sizing_case(params)
    if sizing.server is None:
        # Attached: the real capacity is read before the plan is made; the proxies a plan
        # names and its schedule do not depend on it, so a plan against a nominal one already
        # shows them (and the run checks again once it has the real plan).
        try:
            plan = scenario.plan(params, nominal_capacity(sizing))
        except ValueError:
            return
        _check_schedule(plan, allow_long_schedule)
        _check_proxies(list(plan.cases))
        return
    _check_cache_sizes([sizing], sizing.server.max_model_len)
    try:
        plan = scenario.plan(params, nominal_capacity(sizing))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _check_schedule(plan, allow_long_schedule)
    _check_token_space(plan)
    _check_cache_sizes(list(plan.cases), sizing.server.max_model_len)
    _check_engine_flags(list(plan.cases))
    _check_proxies(list(plan.cases))


def _check_token_space(plan: Plan) -> None:
    """Reject prompt token IDs the embedded model has no embedding for (every request would
    fail at the server): ``--token-id-high`` above its vocabulary, or a dataset row's own
    token ID at or above it."""
    from scenarios.bench_workload import BenchRequests
    from scenarios.common import EMBEDDED_VOCAB

    embedded = [c.name for c in plan.cases if c.server is not None and c.server.model is None]
    if embedded and plan.tokens.high > EMBEDDED_VOCAB:
        raise click.UsageError(
            f"--token-id-high {plan.tokens.high}: the embedded model's vocabulary has "
            f"{EMBEDDED_VOCAB:,} tokens (IDs 0-{EMBEDDED_VOCAB - 1}); case {embedded[0]} "
            "would fail every request"
        )
    # A dataset's own token IDs meet the same vocabulary (bench --dataset with prompt_token_ids)
    items = [i for ph in plan.phases if isinstance(ph.workload, BenchRequests)
             for i in ph.workload.items if i.prompt_token_ids]  # fmt: skip
    beyond = next((i for i in items if max(i.prompt_token_ids or (0,)) >= EMBEDDED_VOCAB), None)
    if embedded and beyond is not None:
        top = max(beyond.prompt_token_ids or (0,))
        raise click.UsageError(
            f"--dataset row {beyond.row} (from 0): token ID {top} is "
            f"beyond the embedded model's vocabulary of {EMBEDDED_VOCAB:,} tokens (IDs "
            f"0-{EMBEDDED_VOCAB - 1}); case {embedded[0]} would fail that request"
        )


def _check_schedule(plan: Plan, allow_long: bool) -> None:
    """Reject a plan whose own clock would keep the run going past the limit."""
    from scenarios.schedule import ScheduleTooLongError, check_schedule

    try:
        check_schedule(plan, allow_long)
    except ScheduleTooLongError as exc:
        raise click.UsageError(str(exc)) from None


def _check_proxies(cases: list[CaseSpec]) -> None:
    """Reject a case whose proxy (nginx, vllm-router) is not installed, before any start."""
    from loadgen.proxies import ProxyNotInstalledError, check_installed

    try:
        check_installed(cases)
    except ProxyNotInstalledError as exc:
        raise click.UsageError(str(exc)) from None


def _check_engine_flags(cases: list[CaseSpec]) -> None:
    """Reject a server configuration the engine's vLLM release cannot take (a flag it lacks,
    a cache size an older CPU release cannot express, a cache larger than the memory it
    lives in), before any start."""
    from server.engine_flags import UnsupportedFlagError, adapt_command
    from server.engines import check_cache_fits, inspect_engine

    for case in cases:
        if case.server is None:
            continue
        try:
            engine = inspect_engine(case.server.python or sys.executable)
            adapt_command(case.server.command(engine.python, "MODEL", 0), engine)
            check_cache_fits(case.server.kv_cache_bytes, case.replicas, engine)
        except (UnsupportedFlagError, ValueError) as exc:  # EngineNotFoundError included
            raise click.UsageError(f"case {case.name}: {exc}") from None
