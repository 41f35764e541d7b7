"""``loadgen trace stats --replicas N --routing P[,P…]``: the fleet half of trace stats, its
options, their checks and its table (text and JSON). The model is
:func:`scenarios.trace_stats.fleet_stats` (docs/fleet.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gateway.routing import DEFAULT_EPSILON, DEFAULT_PREFIX_BLOCKS
from scenarios.common import MAX_CONCURRENCY, MAX_SEED
from server.cli_options import FiniteFloat

if TYPE_CHECKING:
    from scenarios.fleet.model import PolicyPrediction
    from scenarios.fleet.simulate import FleetOutcome
    from scenarios.trace_stats import FleetStats

F = TypeVar("F", bound=Callable[..., Any])

#: Most replicas the fleet model predicts: its replay of the policies grows faster than the
#: square of N (a two-request trace takes seconds at 64 and tens of seconds at 128).
MAX_MODEL_REPLICAS = 64
#: Most blocks a prefix-hash key covers: the gateway's own bound (``GatewayConfig``).
MAX_PREFIX_BLOCKS = 2**16


def fleet_options(command: F) -> F:
    """The fleet options of ``trace stats``."""
    options = [
        click.option("--replicas", type=click.IntRange(1, MAX_MODEL_REPLICAS), default=None,
                     help="Predict a fleet of N replicas, each with the one --cache size."),
        click.option("--routing", default=None,
                     help="Routing policies, comma-separated: round-robin, least-loaded, "
                     "prefix-hash, vllm-router:<round_robin|consistent_hash|cache_aware|"
                     "power_of_two|random|kv_aware>. Default: all."),
        click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=1,
                     show_default=True,
                     help="Clients in a closed loop (1: requests one after another)."),
        click.option("--routing-epsilon", type=FiniteFloat(0, 100), default=DEFAULT_EPSILON,
                     show_default=True, help="prefix-hash's load slack ε (0-100, as the "
                     "gateway's)."),
        click.option("--routing-prefix-blocks", type=click.IntRange(1, MAX_PREFIX_BLOCKS),
                     default=DEFAULT_PREFIX_BLOCKS, show_default=True,
                     help="prefix-hash: 128-token blocks its key covers."),
        click.option("--worker-urls", default=None,
                     help="vllm-router consistent_hash: the N worker URLs its ring hashes, "
                     "comma-separated (default http://127.0.0.1:8000 upwards)."),
        click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
                     help="The replay's seed (prefix-hash keys are its prompts' tokens)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


@dataclass(frozen=True)
class FleetArgs:
    """The fleet options, checked."""

    replicas: int
    policies: list[str]
    cache_tokens: int
    cache_label: str | None
    worker_urls: tuple[str, ...] | None


#: Options that only the fleet prediction reads (given without ``--replicas``: refused).
FLEET_ONLY = ("--routing", "--worker-urls", "--concurrency", "--routing-epsilon",
              "--routing-prefix-blocks", "--seed")  # fmt: skip
#: Options that only one policy reads, and that policy.
POLICY_ONLY = {
    "--routing-epsilon": "prefix-hash",
    "--routing-prefix-blocks": "prefix-hash",
    "--worker-urls": "vllm-router:consistent_hash",
}


def given_flags(ctx: click.Context) -> frozenset[str]:
    """The fleet flags of ``ctx`` that the user passed (not merely left at their default)."""
    defaults = (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    return frozenset(
        flag
        for flag in FLEET_ONLY
        if ctx.get_parameter_source(flag[2:].replace("-", "_")) not in (None, *defaults)
    )


def check_fleet_args(
    replicas: int | None,
    routing: str | None,
    worker_urls: str | None,
    sizes: list[int] | None,
    labels: dict[int, str],
    given: frozenset[str] = frozenset(),
) -> FleetArgs | None:
    """The fleet options checked against each other (``None``: no fleet asked). ``given``:
    the flags the user passed (``--routing-epsilon``, …), as opposed to left at their
    defaults; a fleet-only flag given without ``--replicas``, or a policy's own flag given
    where ``--routing`` leaves that policy out, would be silently ignored, so it is refused.

    Raises:
        ValueError: one line saying what is wrong (the command turns it into exit 2).
    """
    from scenarios.fleet.model import FLEET_POLICIES, parse_fleet_policies

    given = given | {
        n for n, v in (("--routing", routing), ("--worker-urls", worker_urls)) if v is not None
    }
    if replicas is None:
        for name in FLEET_ONLY:
            if name in given:
                raise ValueError(f"{name} needs --replicas N")
        return None
    if routing is not None and replicas < 2:
        raise ValueError("--routing needs --replicas 2 or more")
    if not sizes or len(sizes) != 1:
        raise ValueError("--replicas needs exactly one per-replica cache size (--cache or "
                         "--cache-tokens)")  # fmt: skip
    try:
        policies = parse_fleet_policies(routing) if routing is not None else list(FLEET_POLICIES)
    except ValueError as exc:
        raise ValueError(f"--routing: {exc}") from None
    for name, policy in POLICY_ONLY.items():
        if name in given and policy not in policies:
            raise ValueError(f"{name} applies only to {policy}, which --routing {routing!r} "
                             "leaves out")  # fmt: skip
    urls = _worker_urls(worker_urls, replicas)
    return FleetArgs(replicas, policies, sizes[0], labels.get(sizes[0]), urls)


def _worker_urls(text: str | None, replicas: int) -> tuple[str, ...] | None:
    """``--worker-urls``, checked: each a server URL (a port past 65535 was taken), one per
    replica, none twice: two replicas of one URL would hash to the same ring points, a fleet
    no router has."""
    from scenarios.common import base_url
    from scenarios.values import list_items

    if text is None:
        return None
    try:
        urls = tuple(base_url(u) for u in list_items(text, "worker URL"))
    except ValueError as exc:
        raise ValueError(f"--worker-urls: {exc}") from None
    if len(urls) != replicas:
        raise ValueError(f"--worker-urls: {len(urls)} URLs for {replicas} replicas")
    twice = next((u for i, u in enumerate(urls) if u in urls[:i]), None)
    if twice is not None:
        raise ValueError(f"--worker-urls: {twice} is given twice; each replica has its own")
    return urls


def _pct(low: float, high: float) -> str:
    return f"{low:.2%}" if low == high else f"{low:.2%}–{high:.2%}"


def _ratio(low: float, high: float) -> str:
    return f"{low:.2f}" if abs(low - high) < 0.005 else f"{low:.2f}–{high:.2f}"


def _imbalances(outcome: FleetOutcome) -> tuple[float, float]:
    from scenarios.fleet.model import imbalance

    return (
        imbalance(outcome.requests_per_replica()),
        imbalance(outcome.prefill_tokens_per_replica()),
    )


def _row(name: str, low: FleetOutcome, high: FleetOutcome) -> str:
    (r_low, p_low), (r_high, p_high) = _imbalances(low), _imbalances(high)
    lo_r, hi_r = sorted((r_low, r_high))
    lo_p, hi_p = sorted((p_low, p_high))
    return (
        f"  {name:<30} {_pct(low.hit_rate, high.hit_rate):>17}  {_ratio(lo_r, hi_r):>11}  "
        f"{_ratio(lo_p, hi_p):>11}"
    )


def fleet_text(stats: FleetStats, args: FleetArgs, size: str) -> str:
    """The fleet table: bounds, then one row per policy (a bracket as low–high)."""
    p = stats.prediction
    loop = (
        "requests one after another"
        if stats.concurrency == 1
        else f"a closed loop of {stats.concurrency} clients"
    )
    lines = [
        "",
        f"fleet: {p.replicas} replicas × {args.cache_label or size} ({p.capacity_blocks:,} "
        f"usable blocks each), {loop}, file order",
        f"  {'':<30} {'hit rate':>17}  {'requests':>11}  {'prefill':>11}",
        f"  {'':<30} {'':>17}  {'max/mean':>11}  {'max/mean':>11}",
        f"  {'bound: pooled (one N × C cache)':<30} {p.pooled:>17.2%}",
        _row("bound: spread (worst)", p.spread, p.spread),
        f"  {'one replica of C (reference)':<30} {p.single:>17.2%}",
    ]
    lines += [_row(policy.policy, policy.low, policy.high) for policy in p.policies]
    bracketed = [policy for policy in p.policies if not policy.exact]
    if bracketed:
        lines.append("  bracketed (low–high):")
        lines += [f"    {policy.policy}: {policy.basis}" for policy in bracketed]
    return "\n".join(lines)


def _outcome_json(outcome: FleetOutcome) -> dict[str, Any]:
    requests, prefill = _imbalances(outcome)
    return {
        "hit_rate": outcome.hit_rate,
        "requests_per_replica": outcome.requests_per_replica(),
        "prefill_tokens_per_replica": outcome.prefill_tokens_per_replica(),
        "request_imbalance": requests,
        "prefill_imbalance": prefill,
    }


def _policy_json(policy: PolicyPrediction) -> dict[str, Any]:
    return {
        "policy": policy.policy,
        "exact": policy.exact,
        "hit_rate": policy.hit_rate,
        "low": _outcome_json(policy.low),
        "high": _outcome_json(policy.high),
        "basis": policy.basis,
    }


def fleet_json(stats: FleetStats, kv_bytes_per_token: int) -> dict[str, Any]:
    """The fleet part of ``--json``: hit rates 0–1, imbalances max ÷ mean, tokens."""
    p = stats.prediction
    return {
        "replicas": p.replicas,
        "cache_tokens": stats.cache_tokens,
        "cache_bytes": stats.cache_tokens * kv_bytes_per_token,
        "capacity_blocks": p.capacity_blocks,
        "concurrency": stats.concurrency,
        "pooled_hit_rate": p.pooled,
        "spread": _outcome_json(p.spread),
        "single_replica_hit_rate": p.single,
        "policies": [_policy_json(policy) for policy in p.policies],
    }
