"""scenarios.prefix_eviction: sizing from the real capacity, cases, checks, params validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scenarios.arrivals import ClosedLoop
from scenarios.checks import CapacityAtLeast, LatencyRatio
from scenarios.prefix_eviction import (
    PHASES,
    HitRateCompare,
    PrefixEviction,
    PrefixEvictionParams,
    ProbeCache,
)
from scenarios.workloads import AnchoredPrompts, UniquePrompts
from server.capacity import KVCapacity

GiB = 2**30
CPU_1GIB = KVCapacity(
    tokens=18_688, block_size=128, num_blocks=146, memory_bytes=GiB, source="metrics"
)
GPU = KVCapacity(tokens=74_880, block_size=16, num_blocks=4_680, memory_bytes=None, source="log")


def plan(capacity: KVCapacity = CPU_1GIB, **params: object):
    return PrefixEviction().plan(PrefixEvictionParams(**params), capacity)


def test_phases_in_fixed_order_with_closed_loop_concurrency() -> None:
    p = plan()
    assert (
        tuple(ph.name for ph in p.phases)
        == PHASES
        == ("cold", "warm", "pollution", "revisit", "rewarm")
    )
    assert all(ph.arrival == ClosedLoop(concurrency=4) for ph in p.phases)
    assert all(ph.settle_s == 1.0 for ph in p.phases)
    anchored = AnchoredPrompts(
        anchors=4, prefix_tokens=1024, suffix_tokens=32, requests=48, output_tokens=16
    )
    assert [ph.workload for ph in p.phases if ph.name != "pollution"] == [anchored] * 4


def test_pollution_keeps_its_minimum_on_a_small_cache() -> None:
    # ceil(2.5 × 18,688 / 1,056) = ceil(44.24) = 45 < 48 → the minimum of 48 requests.
    p = plan()
    pollution = next(ph for ph in p.phases if ph.name == "pollution").workload
    assert pollution == UniquePrompts(prompt_tokens=1056, requests=48, output_tokens=16)
    assert p.sizing["pollution_requests"] == 48
    assert p.sizing["pollution_working_set_tokens"] == 48 * 1056
    assert p.sizing["pollution_over_capacity"] == 2.71  # 50,688 / 18,688


def test_pollution_scales_with_capacity() -> None:
    # ceil(2.5 × 74,880 / 1,056) = ceil(177.27) = 178 requests.
    p = plan(GPU, url="http://127.0.0.1:8000")
    assert p.sizing["pollution_requests"] == 178
    assert p.sizing["pollution_over_capacity"] == 2.51  # 178 × 1,056 / 74,880 = 2.5103
    assert p.sizing["capacity_tokens"] == 74_880
    assert p.sizing["capacity_source"] == "log"


def test_auto_control_holds_every_block_allocated_before_revisit() -> None:
    # 128-token blocks: a request needs ceil((1024 + 32 + 16) / 128) = 9 blocks, 8 of them
    # the shared prefix. Blocks: 4 anchors × 8 + 2 phases × 48 requests × 1 + 48 pollution × 9
    # + 1 null block = 32 + 96 + 432 + 1 = 561 = 71,808 tokens. At 2^30 / 18,688 bytes per
    # token with 10 % headroom: ceil(1.1 × 71,808 / 18,688) GiB = ceil(4.23) = 5 GiB.
    p = plan()
    assert [c.name for c in p.cases] == ["1GiB", "control-5GiB"]
    test, control = p.cases
    assert (test.role, control.role) == ("test", "control")
    assert test.server is not None and test.server.kv_cache_bytes == GiB
    assert control.server is not None and control.server.kv_cache_bytes == 5 * GiB
    assert p.sizing["control_needs_blocks"] == 561
    assert p.sizing["control_needs_tokens"] == 71_808
    assert p.sizing["control_cache_bytes"] == 5 * GiB


def test_auto_control_without_memory_bytes_uses_the_requested_cache() -> None:
    # Same numbers with bytes per token taken from --cache 1GiB instead of the server.
    no_memory = KVCapacity(
        tokens=18_688, block_size=128, num_blocks=146, memory_bytes=None, source="metrics"
    )
    assert plan(no_memory).cases[1].name == "control-5GiB"


def test_explicit_and_no_control() -> None:
    assert [c.name for c in plan(control="8GiB").cases] == ["1GiB", "control-8GiB"]
    assert [c.name for c in plan(control="none").cases] == ["1GiB"]


def test_attached_servers() -> None:
    p = plan(url="http://127.0.0.1:8000", control_url="http://127.0.0.1:8001")
    assert [(c.name, c.url, c.server) for c in p.cases] == [
        ("cache", "http://127.0.0.1:8000", None),
        ("control", "http://127.0.0.1:8001", None),
    ]
    # An attached test server gets no locally started control.
    assert [c.name for c in plan(url="http://127.0.0.1:8000").cases] == ["cache"]


def test_cache_servers_use_the_params() -> None:
    server = plan(cache="512MiB", max_model_len=4096, enforce_eager=False).cases[0].server
    assert server is not None
    assert server.kv_cache_bytes == 512 * 2**20
    assert (server.max_model_len, server.enforce_eager, server.enable_prefix_caching) == (
        4096,
        False,
        True,
    )


def test_declared_checks() -> None:
    p = plan()
    # Probe hit threshold: half the prefix, 1024 // 2 = 512 cached tokens.
    cold = (
        "the cold phase must start cold: the server already held these prefixes "
        "(an attached server reused?); run with another --seed"
    )
    assert p.checks == (
        ProbeCache(case="1GiB", phase="cold", expect="miss", why=cold),
        ProbeCache(case="1GiB", phase="warm", expect="hit", min_cached_tokens=512),
        ProbeCache(case="1GiB", phase="revisit", expect="miss", max_cached_tokens=0),
        ProbeCache(case="1GiB", phase="rewarm", expect="hit", min_cached_tokens=512),
        HitRateCompare(
            case="1GiB", phase="revisit", other="warm", relation="below", tolerance=0.02
        ),
        HitRateCompare(
            case="1GiB", phase="revisit", other="cold", relation="close", tolerance=0.02
        ),
        LatencyRatio(
            case="1GiB", phase="revisit", other="warm", metric="ttft_ms", stat="p95", min_ratio=1.2
        ),
        ProbeCache(case="control-5GiB", phase="cold", expect="miss", why=cold),
        CapacityAtLeast(
            case="control-5GiB",
            tokens=71_808,
            why="the control must hold every block allocated before revisit",
        ),
        ProbeCache(case="control-5GiB", phase="revisit", expect="hit", min_cached_tokens=512),
        HitRateCompare(
            case="control-5GiB", phase="revisit", other="warm", relation="close", tolerance=0.02
        ),
    )


def test_prompt_plus_output_must_fit_the_context() -> None:
    PrefixEvictionParams(prefix_tokens=2000, suffix_tokens=32, output_tokens=16)  # 2048: fits
    with pytest.raises(
        ValidationError, match=r"prompt \(2033\) \+ output \(16\) tokens exceed max_model_len 2048"
    ):
        PrefixEvictionParams(prefix_tokens=2001)


def test_settle_must_cover_two_scrape_intervals() -> None:
    PrefixEvictionParams(settle_s=0.5, scrape_interval_s=0.25)  # exactly 2 intervals
    with pytest.raises(
        ValidationError, match=r"settle_s \(0.4\) must be at least two scrape intervals \(0.5\)"
    ):
        PrefixEvictionParams(settle_s=0.4, scrape_interval_s=0.25)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cache", "1gb"),
        ("cache", "0GiB"),
        ("control", "lots"),
        ("pollution_factor", 1.0),
        ("output_tokens", 1),
        ("anchors", 0),
        ("suffix_tokens", 0),
    ],
)
def test_bad_params_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        PrefixEvictionParams(**{field: value})
    assert info.value.errors()[0]["loc"] == (field,)


def test_unknown_params_are_rejected() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PrefixEvictionParams(cache_size="1GiB")  # type: ignore[call-arg]
