"""kv-preemption: when does the KV cache run out mid-decode, and what does it cost?

C requests sent at once, each a unique prompt (no shared prefix) and an exact output length.
All prompts fit at the start; during decode every request grows by one token per step, and
when C × (prompt + output) exceeds the capacity vLLM must preempt (recompute) requests. Cases
are (cache size, C) pairs; cases with the same cache share one server start. The hand
calculation (``analysis.preemption``) is made from each case's real capacity.

See docs/scenarios/kv-preemption.md.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.arrivals import AllAtOnce
from scenarios.base import Scenario
from scenarios.checks import Check, CheckSpec
from scenarios.common import MAX_TOKENS, HttpUrlText, RunParams
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.values import (
    CONCURRENCY,
    ConcurrenciesText,
    SizesText,
    list_items,
    parse_number,
)
from scenarios.workloads import UniquePrompts
from server.capacity import KVCapacity
from server.sizes import format_size, parse_size


def parse_matrix(text: str) -> list[tuple[str, int]]:
    """``"1GiB:8,1GiB:16,4GiB:16"`` → [("1GiB", 8), ("1GiB", 16), ("4GiB", 16)].

    Raises:
        ValueError: an item is not ``SIZE:C`` with a valid size and a positive integer C.
    """
    out = []
    for item in _items(text):
        size, sep, conc = item.partition(":")
        if not sep:
            raise ValueError(f"case {item!r}: expected SIZE:CONCURRENCY, e.g. 1GiB:16")
        try:
            out.append((_size(size.strip()), parse_number(conc, "concurrency", int, CONCURRENCY)))
        except ValueError as exc:
            raise ValueError(f"case {item!r}: {exc}") from None
    if not out:
        raise ValueError("no case given")
    return out


def _items(text: str) -> list[str]:
    return list_items(text, "case")


def _size(text: str) -> str:
    parse_size(text)  # raises ValueError naming the accepted units
    return text


class PreemptionAsPredicted(CheckSpec):
    """Preemptions happen in ``phase`` exactly when the hand calculation predicts them.

    With the case's real capacity (N blocks of B tokens), C requests of ``prompt_tokens`` +
    ``output_tokens`` need C × ceil((prompt + output − 1) / B) blocks at the end of decode
    (vLLM never writes the last output token to the cache); predicted = that exceeds N − 1
    (one block is vLLM's null block). Passes when (Δ``num_preemptions`` > 0) == predicted.
    """

    kind: Literal["preemption_as_predicted"] = "preemption_as_predicted"
    families: ClassVar[tuple[str, ...]] = ("num_preemptions",)
    phase: str
    concurrency: int = Field(gt=0)
    prompt_tokens: int = Field(gt=0, le=MAX_TOKENS)
    output_tokens: int = Field(gt=0, le=MAX_TOKENS)


class KVPeakMatchesWorkingSet(CheckSpec):
    """Where no preemption is predicted, the sampled KV-usage peak is within ``tolerance``
    (a fraction, 0.05 = 5 points) of the final working set / capacity, in blocks."""

    kind: Literal["kv_peak_matches_working_set"] = "kv_peak_matches_working_set"
    families: ClassVar[tuple[str, ...]] = ("kv_cache_usage_perc",)
    phase: str
    concurrency: int = Field(gt=0)
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    tolerance: float = Field(default=0.05, gt=0)


class KVPreemptionParams(RunParams):
    """Knobs of kv-preemption (each becomes a ``--flag``)."""

    cases: str = Field(
        default="1GiB:8,1GiB:16,4GiB:16",
        description="Cases as SIZE:CONCURRENCY pairs (KV cache bytes: 1GiB = 2^30).",
    )
    cache: SizesText | None = Field(
        default=None, description="Comma-separated cache sizes; with --concurrency, the product."
    )
    concurrency: ConcurrenciesText | None = Field(
        default=None, description="Comma-separated concurrencies; with --cache, the product."
    )
    url: HttpUrlText | None = Field(
        default=None, description="Attach to this running server (cache sizes are ignored)."
    )
    prompt_tokens: int = Field(
        default=1024, gt=0, le=MAX_TOKENS, description="Prompt length (tokens), unique."
    )
    output_tokens: int = Field(
        default=512, gt=0, le=MAX_TOKENS, description="Output length (tokens), exact."
    )
    kv_peak_tolerance: float = Field(
        default=0.05, gt=0, le=1, description="KV peak vs predicted working set (fraction)."
    )

    @field_validator("cases")
    @classmethod
    def _cases(cls, value: str) -> str:
        parse_matrix(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KVPreemptionParams:
        self.check_fits(self.prompt_tokens, self.output_tokens)
        self.matrix()  # validates --cache/--concurrency lists
        return self

    def matrix(self) -> list[tuple[str, int]]:
        """The (cache size, concurrency) cases in run order (same sizes adjacent)."""
        if self.cache is None and self.concurrency is None:
            pairs = parse_matrix(self.cases)
        else:
            sizes = _items(self.cache or "1GiB")
            concs = _items(self.concurrency or "16")
            pairs = parse_matrix(",".join(f"{s}:{c}" for s in sizes for c in concs))
        order = {size: i for i, (size, _) in reversed(list(enumerate(pairs)))}
        return sorted(pairs, key=lambda p: order[p[0]])  # stable: keeps C order within a size


class KVPreemption(Scenario[KVPreemptionParams]):
    name: ClassVar[str] = "kv-preemption"
    summary: ClassVar[str] = (
        "C long requests at once: does the KV cache run out mid-decode, as the hand "
        "calculation from the real capacity predicts, and what does preemption cost?"
    )
    Params = KVPreemptionParams

    def _case(self, p: KVPreemptionParams, size: str, conc: int) -> CaseSpec:
        phase = PhaseSpec(
            name=f"c{conc}",
            workload=UniquePrompts(
                prompt_tokens=p.prompt_tokens, requests=conc, output_tokens=p.output_tokens
            ),
            arrival=AllAtOnce(),
            settle_s=p.settle_s,
        )
        if p.url:
            return CaseSpec(
                name=f"attached-c{conc}", url=p.url, label=f"{conc} at once", phases=(phase,)
            )
        cache = parse_size(size)
        return CaseSpec(
            name=f"{format_size(cache)}-c{conc}",
            # Room for every request at once, so the cache (not max_num_seqs) is the limit.
            server=p.server(cache, max_num_seqs=max(conc, 16)),
            label=f"cache {format_size(cache)}, {conc} at once",
            phases=(phase,),
        )

    def sizing_case(self, p: KVPreemptionParams) -> CaseSpec:
        size, conc = p.matrix()[0]
        return self._case(p, size, conc)

    def plan(self, p: KVPreemptionParams, capacity: KVCapacity) -> Plan:
        pairs = p.matrix()
        cases = [self._case(p, size, conc) for size, conc in pairs]
        if len({c.name for c in cases}) != len(cases):
            raise ValueError("duplicate cases in the matrix")
        checks: list[Check] = []
        for case, (_, conc) in zip(cases, pairs, strict=True):
            shape: dict[str, Any] = {
                "case": case.name,
                "phase": f"c{conc}",
                "concurrency": conc,
                "prompt_tokens": p.prompt_tokens,
                "output_tokens": p.output_tokens,
            }
            checks.append(PreemptionAsPredicted(**shape))
            checks.append(KVPeakMatchesWorkingSet(**shape, tolerance=p.kv_peak_tolerance))
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing={
                "prompt_tokens": p.prompt_tokens,
                "output_tokens": p.output_tokens,
                # Attached, the cache sizes of the matrix are not used: only what was.
                **(
                    {"server": f"attached to {p.url}", "concurrency": [c for _, c in pairs]}
                    if p.url
                    else {"matrix": [f"{s}:{c}" for s, c in pairs]}
                ),
                "first_case_capacity_tokens": capacity.tokens,
                "block_size": capacity.block_size,
            },
            cases=tuple(cases),
            phases=(),
            checks=tuple(checks),
            **p.plan_fields(),
        )
