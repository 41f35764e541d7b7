"""scenarios.workloads.materialize: exact, deterministic token-ID prompts."""

from __future__ import annotations

import itertools

from scenarios.workloads import AnchoredPrompts, TokenSpace, UniquePrompts, materialize

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
    reqs = materialize(UNIQUE, "pollution", 0, SPACE) + materialize(UNIQUE, "other", 0, SPACE)
    assert all(len(r.prompt_token_ids) == 1056 for r in reqs)
    assert all(r.group is None for r in reqs)
    # Distinct already in the first 16 tokens (one GPU block), so nothing is shared.
    assert len({r.prompt_token_ids[:16] for r in reqs}) == 96


def test_unique_prompts_do_not_reuse_anchor_prefixes() -> None:
    anchors = {r.prompt_token_ids[:16] for r in materialize(ANCHORED, "warm", 0, SPACE)}
    fresh = {r.prompt_token_ids[:16] for r in materialize(UNIQUE, "pollution", 0, SPACE)}
    assert not anchors & fresh


def test_materialize_is_deterministic_per_seed() -> None:
    a = materialize(ANCHORED, "warm", 0, SPACE)
    assert a == materialize(ANCHORED, "warm", 0, SPACE)
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
