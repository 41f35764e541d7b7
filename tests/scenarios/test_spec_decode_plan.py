"""scenarios.spec_decode: cases, the same requests in every phase, sizing from the smallest
case's capacity, the declared checks, attached mode and flag validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scenarios.arrivals import ClosedLoop
from scenarios.checks import CapacityAtLeast
from scenarios.spec_decode import (
    ChunkTokensMatchAcceptanceLength,
    PerPositionNonIncreasing,
    PerPositionSumsToAccepted,
    SpecDecode,
    SpecDecodeParams,
    SpeedupDirection,
)
from scenarios.workloads import materialize
from server.capacity import KVCapacity
from server.config import EmbeddedDraft

# vLLM 0.32.0 on CPU with a 1 GiB cache: 146 blocks × 128 tokens.
CPU_1GIB = KVCapacity(18_688, 128, 146, 2**30, "metrics")


def test_default_cases_each_get_their_own_server_with_the_same_cache() -> None:
    plan = SpecDecode().plan(SpecDecodeParams(), CPU_1GIB)
    assert [c.name for c in plan.cases] == ["baseline", "ngram", "draft-random", "draft-echo"]
    servers = {c.name: c.server for c in plan.cases}
    assert all(s is not None and s.kv_cache_bytes == 2**30 for s in servers.values())
    # Prefix caching off everywhere: the second phase resends the first one's prompts.
    assert not any(s.enable_prefix_caching for s in servers.values() if s is not None)
    assert servers["baseline"].speculative_config is None  # type: ignore[union-attr]
    assert servers["ngram"].speculative_config == {  # type: ignore[union-attr]
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
    }
    assert servers["draft-random"].draft == EmbeddedDraft(kind="random", layers=2)  # type: ignore[union-attr]
    assert servers["draft-echo"].draft == EmbeddedDraft(kind="echo", layers=2)  # type: ignore[union-attr]


def test_every_phase_sends_the_same_prompts_at_its_concurrency() -> None:
    plan = SpecDecode().plan(SpecDecodeParams(), CPU_1GIB)
    phases = plan.phases_of(plan.cases[0])
    assert [(p.name, p.arrival) for p in phases] == [
        ("c1", ClosedLoop(concurrency=1)),
        ("c16", ClosedLoop(concurrency=16)),
    ]
    assert all(plan.phases_of(c) == phases for c in plan.cases)
    c1, c16 = (materialize(p.workload, p.name, plan.seed, plan.tokens) for p in phases)
    assert len(c1) == len(c16) == 16
    assert [r.prompt_token_ids for r in c1] == [r.prompt_token_ids for r in c16]
    assert len({r.prompt_token_ids for r in c1}) == 16  # one distinct prompt per request
    assert {(len(r.prompt_token_ids), r.max_tokens) for r in c1} == {(256, 128)}


def test_the_workload_is_sized_for_the_smallest_case() -> None:
    plan = SpecDecode().plan(SpecDecodeParams(), CPU_1GIB)
    # A request holds ceil((256 + 128 + 3) / 128) = 4 blocks; 16 at once + the null block:
    # 65 blocks = 8,320 tokens. A 2-layer draft adds 2 × 2,048 B to 57,344 B per token:
    # 2^30 // (128 × 61,440) = 136 blocks = 17,408 tokens (as vLLM 0.32.0 showed).
    assert plan.sizing["blocks_per_request"] == 4
    assert plan.sizing["need_tokens"] == 8_320
    assert plan.sizing["predicted_capacity_tokens"] == {
        "baseline": 18_688,
        "ngram": 18_688,
        "draft-random": 17_408,
        "draft-echo": 17_408,
    }
    assert plan.sizing["smallest_case"] == "draft-random"
    capacity_checks = [c for c in plan.checks if isinstance(c, CapacityAtLeast)]
    assert {c.case for c in capacity_checks} == {c.name for c in plan.cases}
    assert {c.tokens for c in capacity_checks} == {8_320}


def test_a_workload_the_draft_case_cannot_hold_is_refused() -> None:
    # ceil((1500 + 500 + 3) / 128) = 16 blocks × 16 + 1 = 257 blocks = 32,896 tokens.
    params = SpecDecodeParams(prompt_tokens=1500, output_tokens=500)
    with pytest.raises(ValueError, match=r"need 32896 tokens.*case draft-random holds 17408"):
        SpecDecode().plan(params, CPU_1GIB)


def test_declared_checks() -> None:
    plan = SpecDecode().plan(SpecDecodeParams(), CPU_1GIB)
    kinds = [(type(c).__name__, c.case, getattr(c, "phase", None)) for c in plan.checks]
    assert ("SpeedupDirection", "ngram", "c1") in kinds
    assert ("SpeedupDirection", "ngram", "c16") not in kinds
    speedups = [c for c in plan.checks if isinstance(c, SpeedupDirection)]
    assert [(c.case, c.phase, c.faster) for c in speedups] == [
        ("ngram", "c1", True),
        ("draft-random", "c1", False),
        ("draft-random", "c16", False),
    ]
    for kind in (PerPositionNonIncreasing, PerPositionSumsToAccepted,
                 ChunkTokensMatchAcceptanceLength):  # fmt: skip
        assert {(c.case, c.phase) for c in plan.checks if isinstance(c, kind)} == {
            (case, phase)
            for case in ("ngram", "draft-random", "draft-echo")
            for phase in ("c1", "c16")
        }
    assert len(plan.checks) == 4 + 3 + 3 * 2 * 3


def test_truncated_draft_case_and_draft_layers() -> None:
    params = SpecDecodeParams(cases="baseline,draft-truncated", draft_layers=4, k=2)
    plan = SpecDecode().plan(params, CPU_1GIB)
    draft = plan.cases[1].server.draft  # type: ignore[union-attr]
    assert draft == EmbeddedDraft(kind="truncated", layers=4, num_speculative_tokens=2)
    # 57,344 + 4 × 2,048 B per token: 2^30 // (128 × 65,536) = 128 blocks = 16,384 tokens.
    assert plan.sizing["predicted_capacity_tokens"]["draft-truncated"] == 16_384  # type: ignore[index]


def test_attached_server_with_and_without_a_baseline() -> None:
    alone = SpecDecode().plan(SpecDecodeParams(url="http://127.0.0.1:8000"), CPU_1GIB)
    assert [(c.name, c.url, c.server) for c in alone.cases] == [
        ("attached", "http://127.0.0.1:8000", None)
    ]
    assert not any(isinstance(c, SpeedupDirection) for c in alone.checks)
    both = SpecDecode().plan(
        SpecDecodeParams(url="http://127.0.0.1:8000", baseline_url="http://127.0.0.1:8001/"),
        CPU_1GIB,
    )
    assert [(c.name, c.url) for c in both.cases] == [
        ("baseline", "http://127.0.0.1:8001"),
        ("attached", "http://127.0.0.1:8000"),
    ]
    assert SpecDecode().sizing_case(SpecDecodeParams(url="http://127.0.0.1:8000")).name == (
        "attached"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cases": "baseline,medusa"}, "unknown case"),
        ({"cases": "ngram,ngram"}, "named twice"),
        ({"concurrency": "1,0"}, "concurrency 0 must be ≥ 1"),
        ({"concurrency": "4,4"}, "given twice"),
        ({"baseline_url": "http://127.0.0.1:8001"}, "--baseline-url needs --url"),
        ({"prompt_tokens": 2000, "output_tokens": 100}, "exceed max_model_len"),
    ],
)
def test_bad_flags_are_rejected(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SpecDecodeParams.model_validate(fields)


def test_baseline_runs_first_whatever_the_order_given() -> None:
    params = SpecDecodeParams(cases="ngram,baseline")
    assert params.case_names() == ["baseline", "ngram"]
    assert SpecDecode().sizing_case(params).name == "baseline"
