"""scenarios.workloads.materialize: exact, deterministic token-ID prompts, built lazily."""

from __future__ import annotations

import hashlib
import itertools
import tracemalloc

import numpy as np
import pytest

from scenarios.requests import PhaseRequests, PlannedRequest, RequestHeader, header_of
from scenarios.tokens import TokenSpace
from scenarios.workloads import AnchoredPrompts, UniquePrompts, materialize

SPACE = TokenSpace(low=10, high=4000)
ANCHORED = AnchoredPrompts(
    anchors=4, prefix_tokens=1024, suffix_tokens=32, requests=48, output_tokens=16
)
UNIQUE = UniquePrompts(prompt_tokens=1056, requests=48, output_tokens=16)


def test_anchored_requests_cycle_over_anchors_with_exact_lengths() -> None:
    reqs = materialize(ANCHORED, "warm", 0, SPACE)
    assert len(reqs) == 48
    assert [r.request_id for r in reqs[:3]] == ["warm-0000", "warm-0001", "warm-0002"]
    assert [r.group for r in reqs[:6]] == [f"anchors-{i}" for i in (0, 1, 2, 3, 0, 1)]
    assert all(len(r.prompt_token_ids) == 1056 for r in reqs)
    assert all(r.max_tokens == 16 for r in reqs)
    assert all(r.disconnect_after_tokens is None for r in reqs)
    assert all(SPACE.low <= t < SPACE.high for r in reqs for t in r.prompt_token_ids)


def test_same_anchor_same_prefix_in_every_phase_and_request() -> None:
    by_phase = {ph: materialize(ANCHORED, ph, 0, SPACE) for ph in ("cold", "warm", "revisit")}
    for anchor in range(4):
        prefixes = {
            r.prompt_token_ids[:1024]
            for reqs in by_phase.values()
            for r in reqs
            if r.group == f"anchors-{anchor}"
        }
        assert len(prefixes) == 1  # 3 phases × 12 requests, one prefix
    firsts = [by_phase["cold"][a].prompt_token_ids[:1024] for a in range(4)]
    assert len(set(firsts)) == 4  # anchors differ from one another


def test_suffixes_are_unique_across_requests_and_phases() -> None:
    suffixes = [
        r.prompt_token_ids[1024:]
        for ph in ("cold", "warm", "revisit", "rewarm")
        for r in materialize(ANCHORED, ph, 0, SPACE)
    ]
    assert len(suffixes) == 4 * 48
    assert len(set(suffixes)) == len(suffixes)


def test_unique_prompts_are_all_distinct_and_share_no_first_block() -> None:
    reqs = [*materialize(UNIQUE, "pollution", 0, SPACE), *materialize(UNIQUE, "other", 0, SPACE)]
    assert all(len(r.prompt_token_ids) == 1056 for r in reqs)
    assert all(r.group is None for r in reqs)
    # Distinct already in the first 16 tokens (one GPU block), so nothing is shared.
    assert len({r.prompt_token_ids[:16] for r in reqs}) == 96


def test_unique_prompts_do_not_reuse_anchor_prefixes() -> None:
    anchors = {r.prompt_token_ids[:16] for r in materialize(ANCHORED, "warm", 0, SPACE)}
    fresh = {r.prompt_token_ids[:16] for r in materialize(UNIQUE, "pollution", 0, SPACE)}
    assert not anchors & fresh


def test_materialize_is_deterministic_per_seed() -> None:
    a = list(materialize(ANCHORED, "warm", 0, SPACE))
    assert a == list(materialize(ANCHORED, "warm", 0, SPACE))
    b = materialize(ANCHORED, "warm", 1, SPACE)
    assert all(x.prompt_token_ids != y.prompt_token_ids for x, y in zip(a, b, strict=True))


def test_disconnect_setting_is_carried_to_each_request() -> None:
    wl = UniquePrompts(prompt_tokens=8, requests=3, output_tokens=512, disconnect_after_tokens=20)
    assert [r.disconnect_after_tokens for r in materialize(wl, "d", 0, SPACE)] == [20, 20, 20]


def test_token_space_bounds_are_respected() -> None:
    space = TokenSpace(low=100, high=103)
    tokens = list(
        itertools.chain.from_iterable(
            r.prompt_token_ids for r in materialize(UNIQUE, "p", 0, space)
        )
    )
    assert set(tokens) == {100, 101, 102}


def _eager_reference(
    workload: AnchoredPrompts | UniquePrompts, phase: str, seed: int, space: TokenSpace
) -> list[PlannedRequest]:
    """materialize() as it was before it became lazy (commit 2ef9842), kept as the oracle."""

    def tokens(key: str, n: int) -> tuple[int, ...]:
        digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return tuple(int(x) for x in rng.integers(space.low, space.high, size=n))

    out = []
    if isinstance(workload, AnchoredPrompts):
        prefixes = [
            tokens(f"{workload.pool}/{a}", workload.prefix_tokens) for a in range(workload.anchors)
        ]
        for i in range(workload.requests):
            anchor = i % workload.anchors
            suffix = tokens(f"{phase}/suffix/{i}", workload.suffix_tokens)
            out.append(
                PlannedRequest(
                    request_id=f"{phase}-{i:04d}",
                    prompt_token_ids=prefixes[anchor] + suffix,
                    max_tokens=workload.output_tokens,
                    group=f"{workload.pool}-{anchor}",
                )
            )
        return out
    for i in range(workload.requests):
        out.append(
            PlannedRequest(
                request_id=f"{phase}-{i:04d}",
                prompt_token_ids=tokens(f"{phase}/unique/{i}", workload.prompt_tokens),
                max_tokens=workload.output_tokens,
                disconnect_after_tokens=(
                    workload.disconnect_after_tokens if workload.disconnects(i) else None
                ),
            )
        )
    return out


@pytest.mark.parametrize(
    "workload",
    [
        AnchoredPrompts(anchors=3, prefix_tokens=40, suffix_tokens=5, requests=10, output_tokens=4),
        AnchoredPrompts(anchors=2, prefix_tokens=8, suffix_tokens=0, requests=3, output_tokens=2),
        UniquePrompts(
            prompt_tokens=30,
            requests=9,
            output_tokens=4,
            disconnect_after_tokens=2,
            disconnect_fraction=0.5,
        ),
    ],
    ids=["anchored", "anchored-no-suffix", "unique-half-disconnect"],
)
def test_lazy_requests_equal_the_former_eager_ones(
    workload: AnchoredPrompts | UniquePrompts,
) -> None:
    lazy = materialize(workload, "warm", 7, SPACE)
    expected = _eager_reference(workload, "warm", 7, SPACE)
    assert list(lazy) == expected
    assert [lazy[i] for i in reversed(range(len(lazy)))] == expected[::-1]  # any order
    assert lazy[-1] == expected[-1]
    assert lazy[2:5] == expected[2:5]
    assert [lazy.header(i) for i in range(len(lazy))] == [header_of(p) for p in expected]


def test_a_100k_request_phase_holds_no_prompt_until_indexed() -> None:
    # Eagerly, 100,000 prompts of 1,024 tokens are 1.0e8 Python ints: ≥ 819 MB of tuple slots
    # alone. Lazily, materialising allocates less than one such prompt (a tuple of 1,024 ints
    # ≈ 8,248 B of slots + 1,024 × 28 B int objects ≈ 37 KB); a header builds no prompt.
    workload = UniquePrompts(prompt_tokens=1024, requests=100_000, output_tokens=16)
    tracemalloc.start()
    try:
        reqs = materialize(workload, "flood", 0, SPACE)
        header = reqs.header(99_999)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 37_000
    assert len(reqs) == 100_000
    assert header == RequestHeader("flood-99999", None, 1024, 16)
    assert len(reqs[99_999].prompt_token_ids) == 1024


def test_indexing_out_of_range_raises_index_error() -> None:
    reqs = materialize(UNIQUE, "p", 0, SPACE)
    with pytest.raises(IndexError):
        reqs[48]
    with pytest.raises(IndexError):
        reqs.header(-49)


def test_a_list_of_built_requests_has_the_same_interface() -> None:
    built = list(materialize(ANCHORED, "warm", 0, SPACE))[:3]
    wrapped = PhaseRequests.of(built)
    assert len(wrapped) == 3
    assert list(wrapped) == built
    assert wrapped.header(1) == RequestHeader("warm-0001", "anchors-1", 1056, 16)
    assert PhaseRequests.of(wrapped) is wrapped
