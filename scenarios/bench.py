"""bench: the everyday serving benchmark — N requests per phase, closed or open loop, swept.

Each value of ``--concurrency`` (closed loop: exactly C requests in flight until N are done)
or ``--rate`` (open loop: Poisson, gamma or constant gaps, optionally capped with
``--max-concurrency`` and ramped with ``--ramp-up``) is one phase of ``--requests`` N
requests; an optional warm-up phase comes first. Prompts are synthetic token IDs of exact
lengths or rows of a dataset file (``scenarios.bench_dataset``), sent to
``/v1/completions`` or ``/v1/chat/completions`` with extra body fields and headers
(``scenarios.bench_workload``). The checks are what a benchmark must hold to be read at all:
N sent per phase, exactly C in flight (closed loop), exact outputs, no failures.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.arrivals import ClosedLoop, OpenLoop
from scenarios.base import Scenario
from scenarios.bench_dataset import (
    DatasetError,
    Selection,
    SharegptTurns,
    content_sha256,
    load_tokenizer,
    read_rows,
    select,
)
from scenarios.bench_workload import BenchItem, BenchRequests, Endpoint
from scenarios.checks import Check, CheckSpec
from scenarios.common import (
    MAX_BURSTINESS,
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_TEMPERATURE,
    MAX_TOKENS,
    MIN_BURSTINESS,
    HttpUrlText,
    RunParams,
    SizeText,
)
from scenarios.fleet_cases import FleetParams, fleet_cases, fleet_checks
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.request_extras import (
    owned_field_problem,
    parse_extra_body,
    parse_headers,
    recorded_extra_body,
    recorded_headers,
)
from scenarios.values import (
    ConcurrenciesText,
    DurationText,
    RatesText,
    SLOText,
    exact_label,
    parse_concurrencies,
    parse_duration,
    parse_rates,
)
from server.capacity import KVCapacity
from server.net.input_files import file_problem
from server.sizes import format_size, parse_size

WARMUP_PHASE = "warmup"


class RequestsSent(CheckSpec):
    """Phase ``phase`` sent exactly ``requests`` requests and has one record for each."""

    kind: Literal["bench_requests_sent"] = "bench_requests_sent"
    phase: str
    requests: int = Field(gt=0)


class ExactConcurrency(CheckSpec):
    """A closed loop held exactly ``concurrency`` requests in flight: the client's records
    never overlap more than C at once and reach C, and the server's sampled
    ``num_requests_running`` + ``num_requests_waiting`` peak is C (a lower bound)."""

    kind: Literal["bench_exact_concurrency"] = "bench_exact_concurrency"
    families: ClassVar[tuple[str, ...]] = ("num_requests_running",)
    phase: str
    concurrency: int = Field(gt=0)


class OutputsExact(CheckSpec):
    """Every successful request of ``phase`` got exactly the output tokens it asked for
    (``ignore_eos``; a server without it is flagged here)."""

    kind: Literal["bench_outputs_exact"] = "bench_outputs_exact"
    phase: str


class NoFailures(CheckSpec):
    """No request of ``phase`` failed, was aborted or was left unsent."""

    kind: Literal["bench_no_failures"] = "bench_no_failures"
    phase: str


class BenchParams(RunParams, FleetParams):
    """Knobs of bench (each becomes a ``--flag``)."""

    url: HttpUrlText | None = Field(
        default=None, description="Attach to this running server (no server is started)."
    )
    cache: SizeText = Field(default="1GiB", description="KV cache of the embedded server.")
    requests: int = Field(default=64, gt=0, le=MAX_REQUESTS, description="Requests per phase (N).")
    concurrency: ConcurrenciesText | None = Field(
        default=None,
        description="Closed loop: requests in flight, one phase per value (e.g. 1,4,16); "
        "default 1 when no --rate.",
    )
    rate: RatesText | None = Field(
        default=None, description="Open loop: arrival rates in req/s, one phase per value."
    )
    max_concurrency: int | None = Field(
        default=None, gt=0, le=MAX_CONCURRENCY, description="Open loop: client cap in flight."
    )
    arrival_pattern: Literal["gamma", "constant"] = Field(
        default="gamma",
        description="Open loop: gamma gaps (Poisson at burstiness 1) or constant.",
    )
    burstiness: float = Field(
        default=1.0,
        ge=MIN_BURSTINESS,
        le=MAX_BURSTINESS,
        description="Gamma shape: 1 = Poisson, < 1 burstier.",
    )
    ramp_up: DurationText | None = Field(
        default=None, description="Open loop: rate rises linearly from 0 over this (e.g. 10s)."
    )
    warmup_requests: int = Field(
        default=0, ge=0, le=MAX_REQUESTS, description="Requests of a warm-up phase first."
    )
    input_len: int = Field(
        default=256, gt=0, le=MAX_TOKENS, description="Synthetic prompt length (tokens)."
    )
    output_len: int = Field(
        default=64,
        gt=0,
        le=MAX_TOKENS,
        description="Output length (tokens); a dataset row's own wins.",
    )
    input_len_spread: float = Field(
        default=0.0, ge=0, lt=1, description="Synthetic prompt lengths in L·(1 ± spread)."
    )
    output_len_spread: float = Field(
        default=0.0, ge=0, lt=1, description="Synthetic output lengths in L·(1 ± spread)."
    )
    dataset: str | None = Field(
        default=None, description="JSONL (prompt/messages/prompt_token_ids) or ShareGPT JSON."
    )
    sharegpt_turns: SharegptTurns = Field(
        default="first", description="ShareGPT: first user turn, or every turn with history."
    )
    dataset_seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seed of --shuffle (numpy's: ≥ 0)."
    )
    shuffle: bool = Field(default=False, description="Take dataset rows in a seeded order.")
    dataset_output_len: bool = Field(
        default=True, description="Use a row's own output length where it has one."
    )
    tokenizer: str | None = Field(
        default=None,
        description="Tokenizer dir measuring text prompts (default: the served model's, or "
        "the embedded model's).",
    )
    endpoint: Endpoint = Field(default="completions", description="completions or chat.")
    extra_body: str | None = Field(
        default=None, description="JSON object merged into every body, e.g. '{\"priority\": 1}'."
    )
    header: tuple[str, ...] = Field(
        default=(), description="NAME:VALUE header (repeatable); secrets are redacted in files."
    )
    ignore_eos: bool = Field(default=True, description="Ask for exact output lengths.")
    temperature: float = Field(
        default=0.0, ge=0, le=MAX_TEMPERATURE, description="Sampling temperature."
    )
    slo: SLOText | None = Field(
        default=None, description="Goodput SLOs, e.g. ttft=200ms,tpot=50ms[,e2el=5s]."
    )
    max_num_seqs: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Embedded server's batch limit (default: enough for the largest C).",
    )

    @field_validator("extra_body")
    @classmethod
    def _extra_body(cls, value: str | None) -> str | None:
        if value is not None:
            parse_extra_body(value)
        return value

    @field_validator("header")
    @classmethod
    def _headers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_headers(value)
        return value

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        why = None if value is None else file_problem(value)
        if why is not None:  # /dev/zero exists: it is a device, not a dataset
            raise ValueError(f"{value}: {why}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BenchParams:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give concurrency (closed loop) or rate (open loop), not both")
        if self.rate is None and (self.max_concurrency or self.ramp_up):
            raise ValueError("max_concurrency and ramp_up apply to an open loop (rate)")
        if self.endpoint == "chat" and self.dataset is None:
            raise ValueError("endpoint chat needs a dataset of text prompts")
        owned = owned_field_problem(self.extra(), self.ignore_eos)
        if owned is not None:
            raise ValueError(f"extra_body {owned}")
        if self.dataset is None:
            self.check_fits(self.input_len, self.output_len)
        else:
            select_dataset(self, self.rows_needed())  # a bad file fails here, before any load
        return self

    def rows_needed(self) -> int:
        """Dataset rows one run sends: the warm-up's, then N per phase."""
        return self.warmup_requests + self.requests * len(self.concurrencies() or self.rates())

    def concurrencies(self) -> list[int]:
        """The closed loop's concurrencies (empty for an open loop)."""
        if self.rate is not None:
            return []
        return parse_concurrencies(self.concurrency or "1")

    def rates(self) -> list[float]:
        """The open loop's rates (empty for a closed loop)."""
        return parse_rates(self.rate) if self.rate is not None else []

    def extra(self) -> dict[str, Any]:
        """The ``--extra-body`` object."""
        return parse_extra_body(self.extra_body) if self.extra_body else {}

    def headers(self) -> tuple[tuple[str, str], ...]:
        """The ``--header`` pairs."""
        return parse_headers(self.header)

    def recorded(self) -> dict[str, Any]:
        """The parameters as the plan records them: credential header values and extra body
        fields redacted (``scenarios.request_extras``)."""
        out = self.model_dump()
        out["header"] = [f"{k}: {v}" for k, v in recorded_headers(self.headers())]
        if self.extra_body is not None:
            out["extra_body"] = json.dumps(recorded_extra_body(self.extra()))
        return out


def _tokenizer_dir(p: BenchParams) -> Path:
    if p.tokenizer:
        return Path(p.tokenizer)
    if p.model:
        return Path(p.model)
    from server.embedded_model import tokenizer_dir

    return tokenizer_dir()


def select_dataset(p: BenchParams, total: int) -> tuple[Selection, str]:
    """The dataset rows the run sends (``total`` of them) and the file's sha256.

    Raises:
        ValueError: the file or its rows cannot be used (named), before any load.
    """
    assert p.dataset is not None
    path = Path(p.dataset)
    stat = path.stat()
    return _selected(
        path, stat.st_mtime_ns, stat.st_size, str(_tokenizer_dir(p)), p.sharegpt_turns, total,
        p.endpoint, p.max_model_len, p.output_len, p.dataset_output_len, p.shuffle,
        p.dataset_seed,
    )  # fmt: skip


@functools.lru_cache(maxsize=8)
def _selected(
    path: Path, _mtime_ns: int, _size: int, tokenizer_dir: str, turns: SharegptTurns,
    total: int, endpoint: Endpoint, max_model_len: int, output_len: int, row_output: bool,
    shuffle: bool, seed: int,
) -> tuple[Selection, str]:  # fmt: skip
    # Cached: the parameters are validated several times per run, and a file is read once
    # (keyed by its modification time and size, so an edited file is read again).
    try:
        tokenizer = load_tokenizer(Path(tokenizer_dir))
        rows = read_rows(path, turns, tokenizer, max_model_len)
        selection = select(
            rows, total=total, endpoint=endpoint, tokenizer=tokenizer,
            max_model_len=max_model_len, default_output_tokens=output_len,
            use_row_output=row_output, shuffle=shuffle, seed=seed,
        )  # fmt: skip
    except DatasetError as exc:
        raise ValueError(str(exc)) from None
    return selection, content_sha256(path)


class Bench(Scenario[BenchParams]):
    name: ClassVar[str] = "bench"
    summary: ClassVar[str] = (
        "The everyday benchmark: N requests per phase at each concurrency (closed loop) or "
        "rate (open loop), synthetic or dataset prompts, completions or chat."
    )
    Params = BenchParams

    def _case(self, p: BenchParams) -> CaseSpec:
        if p.url:
            return CaseSpec(name="attached", url=p.url, label=f"attached to {p.url}")
        cache = parse_size(p.cache)
        largest = max([*p.concurrencies(), p.max_concurrency or 0, 16])
        return CaseSpec(
            name=f"{format_size(cache)}",
            server=p.server(cache, max_num_seqs=p.max_num_seqs or largest),
            label=f"embedded server, cache {format_size(cache)}",
        )

    def _cases(self, p: BenchParams) -> tuple[CaseSpec, ...]:
        """The run's one case, or a fleet run's case per routing policy."""
        case = self._case(p)
        if not p.is_fleet or case.server is None:
            return (case,)
        return fleet_cases(p, case.server, "", case.label)

    def sizing_case(self, p: BenchParams) -> CaseSpec:
        return self._cases(p)[0]

    def _workload(self, p: BenchParams, count: int, items: tuple[BenchItem, ...]) -> BenchRequests:
        return BenchRequests(
            requests=count, endpoint=p.endpoint, prompt_tokens=p.input_len,
            output_tokens=p.output_len, input_spread=p.input_len_spread,
            output_spread=p.output_len_spread, items=items, temperature=p.temperature,
            ignore_eos=p.ignore_eos, extra_body=p.extra(), headers=p.headers(),
        )  # fmt: skip

    def plan(self, p: BenchParams, capacity: KVCapacity) -> Plan:
        loads = _loads(p)
        counts = ([p.warmup_requests] if p.warmup_requests else []) + [p.requests] * len(loads)
        sizing: dict[str, object] = {}
        slices: list[tuple[BenchItem, ...]] = [()] * len(counts)
        if p.dataset is not None:
            selection, sha = select_dataset(p, sum(counts))
            starts = [sum(counts[:k]) for k in range(len(counts))]
            slices = [selection.items[s : s + n] for s, n in zip(starts, counts, strict=True)]
            sizing |= {
                "dataset": p.dataset,
                "dataset_sha256": sha,
                "dataset_rows_read": selection.rows_read,
                "dataset_rows_skipped_too_long": selection.skipped_too_long,
                "dataset_rows_reused": selection.reused,
                "prompt_tokens_measured_with": str(_tokenizer_dir(p)),
            }
        else:
            sizing |= {"input_len": p.input_len, "output_len": p.output_len}
        phases: list[PhaseSpec] = []
        if p.warmup_requests:
            c = max(p.concurrencies() or [p.max_concurrency or 1])
            phases.append(
                PhaseSpec(
                    name=WARMUP_PHASE,
                    workload=self._workload(p, p.warmup_requests, slices[0]),
                    arrival=ClosedLoop(concurrency=min(c, p.warmup_requests)),
                    settle_s=p.settle_s,
                )
            )
        for (name, arrival), items in zip(loads, slices[len(phases) :], strict=True):
            phases.append(
                PhaseSpec(
                    name=name,
                    workload=self._workload(p, p.requests, items),
                    arrival=arrival,
                    settle_s=p.settle_s,
                )
            )
        cases = self._cases(p)
        checks = _checks(p, cases, loads)
        sizing |= {
            "server": "attached" if p.url else "embedded",
            "kv_capacity_tokens": capacity.tokens,
            "block_size": capacity.block_size,
            "num_blocks": capacity.num_blocks,
            **({"kv_cache": format_size(parse_size(p.cache))} if not p.url else {}),
            "endpoint": p.endpoint,
            "requests_per_phase": p.requests,
        }
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.recorded(),
            sizing=sizing,
            cases=cases,
            phases=tuple(phases),
            checks=tuple(checks),
            **p.plan_fields(),
        )


def _loads(p: BenchParams) -> list[tuple[str, ClosedLoop | OpenLoop]]:
    """(phase name, arrival) of each load point: ``cN`` closed loops, then ``rλ`` open loops."""
    loads: list[tuple[str, ClosedLoop | OpenLoop]] = [
        (f"c{c}", ClosedLoop(concurrency=c)) for c in p.concurrencies()
    ]
    ramp = parse_duration(p.ramp_up) if p.ramp_up else 0.0
    for r in p.rates():
        open_loop = OpenLoop(
            rate_rps=r, burstiness=p.burstiness, pattern=p.arrival_pattern, seed=p.seed,
            max_concurrency=p.max_concurrency, ramp_s=ramp,
        )  # fmt: skip
        loads.append((f"r{exact_label(r)}", open_loop))
    return loads


def _checks(
    p: BenchParams, cases: tuple[CaseSpec, ...], loads: list[tuple[str, ClosedLoop | OpenLoop]]
) -> list[Check]:
    """Per case and load point: every request sent, a closed loop's concurrency held, outputs
    of the asked length, no failures; per fleet case its KV-cache events beside the model
    (``scenarios.fleet_cases.fleet_checks``)."""
    checks: list[Check] = []
    for case, (name, load) in ((c, nl) for c in cases for nl in loads):
        checks.append(RequestsSent(case=case.name, phase=name, requests=p.requests))
        if load.steady_concurrency is not None:
            checks.append(
                ExactConcurrency(
                    case=case.name,
                    phase=name,
                    concurrency=min(load.steady_concurrency, p.requests),
                )
            )
        checks.append(OutputsExact(case=case.name, phase=name))
        checks.append(NoFailures(case=case.name, phase=name))
    return [*checks, *fleet_checks(cases)]
