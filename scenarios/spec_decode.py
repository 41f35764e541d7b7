"""spec-decode: is speculative decoding paying off, and where does it stop paying?

Cases, each its own server with the same KV cache size, all sent the same requests:

- ``baseline``: no speculation;
- ``ngram``: prompt lookup (vLLM's n-gram proposer), ``k`` proposals per step;
- ``draft-random``: a small draft with random weights (``server.model_variant.DraftSpec``):
  acceptance ≈ 0, cost > 0; its figures measure the draft's cost c;
- ``draft-echo``: a draft of the same size that proposes the last token again; right
  wherever the target repeats one token (the embedded model often does, greedily);
- ``draft-truncated`` (not a default case): the target's first layers with its embeddings
  and head; on the embedded model its acceptance stays near 0 (α 0.000 with 2 layers, 0.057
  with 24 of 28; docs/scenarios/spec-decode.md), so the echo draft is the case between the
  other two.

Phases: the same requests (the same prompts: ``AnchoredPrompts`` with one prompt per
request) sent at each concurrency of ``--concurrency``, closed loop, greedy, ``ignore_eos``,
exact lengths. Prefix caching is off in every case so that a later phase's prompts are not
served from the cache the earlier phase filled (TTFT stays comparable across phases).

KV capacity differs per case: a draft model's layers keep their own KV in the same cache
(``ModelVariant.capacity_tokens``), so the workload is sized to fit the smallest case: the
largest phase's requests, each holding ceil((prompt + output + k) / block) blocks (k lookahead
slots for the proposals), must fit the usable blocks (all but vLLM's null block) of every case.
A check per case confirms it against each server's real capacity.

Attached (``--url``, a server with speculation configured): that server is the ``attached``
case; ``--baseline-url`` adds its baseline, else the speedup figures are skipped with a note.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.arrivals import ClosedLoop
from scenarios.base import Scenario
from scenarios.checks import CapacityAtLeast, Check, CheckSpec
from scenarios.common import (
    MAX_RATIO,
    MAX_REQUESTS,
    MAX_TOKENS,
    HttpUrlText,
    RunParams,
    SizeText,
    same_server,
)
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.values import ConcurrenciesText, list_items, parse_concurrencies
from scenarios.workloads import AnchoredPrompts
from server.capacity import KVCapacity
from server.config import EmbeddedDraft, ServerConfig
from server.model_variant import CPU_BLOCK_SIZE
from server.sizes import format_size, parse_size

#: Case names → what each speculates with (``None``: no speculation).
CASE_KINDS: dict[str, str | None] = {
    "baseline": None,
    "ngram": "ngram",
    "draft-random": "random",
    "draft-echo": "echo",
    "draft-truncated": "truncated",
}
BASELINE = "baseline"
ATTACHED = "attached"


class SpeedupDirection(CheckSpec):
    """The case's TPOT in ``phase`` against the baseline's in the same phase: with
    ``faster`` the measured speedup (baseline TPOT mean ÷ case TPOT mean) is above 1,
    without it below 1."""

    kind: Literal["spec_speedup_direction"] = "spec_speedup_direction"
    phase: str
    baseline: str
    faster: bool


class PerPositionNonIncreasing(CheckSpec):
    """Per-position acceptance rates (accepted at position i ÷ drafts, from counter deltas)
    never rise from one position to the next by more than ``tolerance`` (a fraction)."""

    kind: Literal["spec_per_position_non_increasing"] = "spec_per_position_non_increasing"
    phase: str
    tolerance: float = Field(default=0.02, ge=0)


class PerPositionSumsToAccepted(CheckSpec):
    """The per-position accepted counts (deltas) add up to the accepted-token delta, within
    ``tolerance_tokens``."""

    kind: Literal["spec_per_position_sums_to_accepted"] = "spec_per_position_sums_to_accepted"
    phase: str
    tolerance_tokens: float = Field(default=0.0, ge=0)


class ChunkTokensMatchAcceptanceLength(CheckSpec):
    """The client's mean tokens per decode chunk agrees with the server's mean acceptance
    length τ = 1 + accepted ÷ drafts within ``tolerance`` (relative)."""

    kind: Literal["spec_chunk_tokens_match_tau"] = "spec_chunk_tokens_match_tau"
    phase: str
    tolerance: float = Field(default=0.10, gt=0)


def _items(text: str) -> list[str]:
    return list_items(text, "case")


class SpecDecodeParams(RunParams):
    """Knobs of spec-decode (each becomes a ``--flag``)."""

    cache: SizeText = Field(default="1GiB", description="KV cache size of every case (2^30 B).")
    k: int = Field(default=3, ge=1, le=8, description="Proposed tokens per step (k).")
    concurrency: ConcurrenciesText = Field(
        default="1,16", description="Concurrencies, one phase each."
    )
    cases: str = Field(
        default="baseline,ngram,draft-random,draft-echo",
        description=f"Cases, from: {', '.join(CASE_KINDS)}.",
    )
    draft_layers: int = Field(default=2, ge=1, le=27, description="Layers of every draft model.")
    prompt_lookup_max: int = Field(
        default=4, ge=1, le=MAX_TOKENS, description="n-gram: longest match (tokens)."
    )
    requests: int = Field(
        default=16, gt=0, le=MAX_REQUESTS, description="Requests per phase (same in each)."
    )
    prompt_tokens: int = Field(
        default=256, gt=0, le=MAX_TOKENS, description="Prompt length (tokens)."
    )
    output_tokens: int = Field(
        default=128, gt=1, le=MAX_TOKENS, description="Output length (tokens), exact."
    )
    url: HttpUrlText | None = Field(
        default=None, description="Attach to this running server (speculation configured)."
    )
    baseline_url: HttpUrlText | None = Field(
        default=None, description="With --url: a running server without speculation."
    )
    hysteresis: float = Field(
        default=0.05, gt=0, lt=1, description="Speedup band around 1 for keep/disable."
    )
    position_tolerance: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="Per-position rates may rise by this much (fraction).",
    )
    chunk_tolerance: float = Field(
        default=0.10, gt=0, le=MAX_RATIO, description="Client tokens per chunk vs τ (relative)."
    )

    @field_validator("cases")
    @classmethod
    def _cases(cls, value: str) -> str:
        names = _items(value)
        unknown = [n for n in names if n not in CASE_KINDS]
        if unknown or not names:
            raise ValueError(f"unknown case(s) {unknown}; choose from {', '.join(CASE_KINDS)}")
        if len(set(names)) != len(names):
            raise ValueError("a case is named twice")
        return ",".join(names)

    @model_validator(mode="after")
    def _consistent(self) -> SpecDecodeParams:
        self.check_fits(self.prompt_tokens, self.output_tokens)
        if self.prompt_lookup_max > self.max_model_len:  # vLLM would take it, then fail
            raise ValueError(
                f"prompt_lookup_max ({self.prompt_lookup_max}) is longer than the context "
                f"(max_model_len {self.max_model_len}): no match can be that long"
            )
        if self.baseline_url and not self.url:
            raise ValueError("--baseline-url needs --url (the server with speculation)")
        if self.baseline_url and self.url and same_server(self.url, self.baseline_url):
            raise ValueError("--baseline-url must name another server than --url")
        return self

    def concurrencies(self) -> list[int]:
        return parse_concurrencies(self.concurrency)

    def case_names(self) -> list[str]:
        """The cases in run order: baseline first when present (it sizes the workload)."""
        names = _items(self.cases)
        return sorted(names, key=lambda n: n != BASELINE)


def phase_name(concurrency: int) -> str:
    return f"c{concurrency}"


def blocks_per_request(prompt_tokens: int, output_tokens: int, k: int, block_size: int) -> int:
    """KV blocks one request holds at its end: ceil((prompt + output + k) / block); the k
    lookahead slots hold the last step's proposals."""
    return math.ceil((prompt_tokens + output_tokens + k) / block_size)


def predicted_capacity_tokens(server: ServerConfig, block_size: int) -> int | None:
    """Tokens the case's cache holds, draft layers included (``None`` for a model of unknown
    KV geometry): floor(bytes ÷ (block × KV bytes per token)) × block, as vLLM sizes it."""
    per_token = server.kv_bytes_per_token()
    if per_token is None:
        return None
    return server.kv_cache_bytes // (block_size * per_token) * block_size


class SpecDecode(Scenario[SpecDecodeParams]):
    name: ClassVar[str] = "spec-decode"
    summary: ClassVar[str] = (
        "Speculative decoding (n-gram, draft models): acceptance per position, predicted vs "
        "measured speedup per concurrency, and the acceptance below which it stops paying."
    )
    Params = SpecDecodeParams

    def _phases(self, p: SpecDecodeParams) -> tuple[PhaseSpec, ...]:
        # One prompt per request, keyed by the pool (not the phase): the same prompts in
        # every phase and every case.
        workload = AnchoredPrompts(
            pool="spec",
            anchors=p.requests,
            prefix_tokens=p.prompt_tokens,
            suffix_tokens=0,
            requests=p.requests,
            output_tokens=p.output_tokens,
        )
        return tuple(
            PhaseSpec(
                name=phase_name(c),
                workload=workload,
                arrival=ClosedLoop(concurrency=c),
                settle_s=p.settle_s,
            )
            for c in p.concurrencies()
        )

    def _server(self, p: SpecDecodeParams, name: str) -> ServerConfig:
        kind = CASE_KINDS[name]
        extra: dict[str, object] = {
            "enable_prefix_caching": False,
            # Room for every request of the largest phase in one batch.
            "max_num_seqs": max(max(p.concurrencies()), 16),
        }
        if kind == "ngram":
            extra["speculative_config"] = {
                "method": "ngram",
                "num_speculative_tokens": p.k,
                "prompt_lookup_max": p.prompt_lookup_max,
            }
        elif kind is not None:
            extra["draft"] = EmbeddedDraft(
                kind=kind,  # type: ignore[arg-type]  # a DraftKind by CASE_KINDS
                layers=p.draft_layers,
                num_speculative_tokens=p.k,
            )
        return p.server(parse_size(p.cache), **extra)

    def _labels(self, p: SpecDecodeParams) -> dict[str, str]:
        size = format_size(parse_size(p.cache))
        return {
            "baseline": f"no speculation, cache {size}",
            "ngram": f"n-gram prompt lookup, k={p.k}, lookup ≤ {p.prompt_lookup_max}",
            "draft-random": f"draft: {p.draft_layers}-layer random weights, k={p.k}",
            "draft-echo": f"draft: {p.draft_layers}-layer echo of the last token, k={p.k}",
            "draft-truncated": f"draft: the target's first {p.draft_layers} layers, k={p.k}",
        }

    def _cases(self, p: SpecDecodeParams) -> list[CaseSpec]:
        phases = self._phases(p)
        if p.url:
            cases = [CaseSpec(name=ATTACHED, url=p.url, label="attached server", phases=phases)]
            if p.baseline_url:
                base = CaseSpec(
                    name=BASELINE, url=p.baseline_url, label="attached baseline", phases=phases
                )
                cases.insert(0, base)
            return cases
        labels = self._labels(p)
        return [
            CaseSpec(name=n, server=self._server(p, n), label=labels[n], phases=phases)
            for n in p.case_names()
        ]

    def sizing_case(self, p: SpecDecodeParams) -> CaseSpec:
        return self._cases(p)[0]

    def plan(self, p: SpecDecodeParams, capacity: KVCapacity) -> Plan:
        cases = self._cases(p)
        block = capacity.block_size or CPU_BLOCK_SIZE
        per_request = blocks_per_request(p.prompt_tokens, p.output_tokens, p.k, block)
        largest = min(max(p.concurrencies()), p.requests)
        # + 1: vLLM keeps one block back (the null block).
        need_tokens = (largest * per_request + 1) * block
        predicted = {
            c.name: predicted_capacity_tokens(c.server, block) if c.server else None for c in cases
        }
        predicted[cases[0].name] = capacity.tokens  # the sizing case's real capacity
        known = {n: t for n, t in predicted.items() if t is not None}
        smallest = min(known, key=lambda n: known[n]) if known else None
        if smallest is not None and known[smallest] < need_tokens:
            raise ValueError(
                f"{largest} requests of {p.prompt_tokens} + {p.output_tokens} (+ {p.k}) tokens "
                f"need {need_tokens} tokens of KV ({per_request} blocks of {block} each + the "
                f"null block), but case {smallest} holds {known[smallest]}; use a larger "
                "--cache or fewer/shorter requests"
            )
        checks: list[Check] = [
            CapacityAtLeast(
                case=c.name,
                tokens=need_tokens,
                why=f"{largest} requests × {per_request} blocks + the null block fit without "
                "preemption",
            )
            for c in cases
        ]
        checks += self._checks(p, cases)
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing={
                "k": p.k,
                "block_size": block,
                "blocks_per_request": per_request,
                "largest_concurrency": largest,
                "need_tokens": need_tokens,
                "sizing_case_capacity_tokens": capacity.tokens,
                "predicted_capacity_tokens": predicted,
                "smallest_case": smallest,
            },
            cases=tuple(cases),
            phases=(),
            checks=tuple(checks),
            **p.plan_fields(),
        )

    def _checks(self, p: SpecDecodeParams, cases: list[CaseSpec]) -> list[Check]:
        names = {c.name for c in cases}
        speculating = [c.name for c in cases if c.name != BASELINE]
        phases = [phase_name(c) for c in p.concurrencies()]
        checks: list[Check] = []
        if BASELINE in names:
            if "ngram" in names and 1 in p.concurrencies():
                checks.append(
                    SpeedupDirection(case="ngram", phase="c1", baseline=BASELINE, faster=True)
                )
            if "draft-random" in names:
                checks += [
                    SpeedupDirection(case="draft-random", phase=ph, baseline=BASELINE, faster=False)
                    for ph in phases
                ]
        for case in speculating:
            for ph in phases:
                checks += [
                    PerPositionNonIncreasing(case=case, phase=ph, tolerance=p.position_tolerance),
                    PerPositionSumsToAccepted(case=case, phase=ph),
                    ChunkTokensMatchAcceptanceLength(
                        case=case, phase=ph, tolerance=p.chunk_tolerance
                    ),
                ]
        return checks
