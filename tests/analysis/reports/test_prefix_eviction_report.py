"""prefix-eviction's report: probe rows (first request by index per prefix group), verdicts."""

from __future__ import annotations

import msgspec
import pandas as pd

from analysis.checks import evaluate
from analysis.latency import request_frame
from analysis.models import Verdict
from analysis.reports.prefix_eviction.report import (
    REPORT,
    HitRates,
    PrefixCase,
    PrefixEvictionDetails,
    Probe,
    probe_rows,
)
from loadgen.runformat import ReadRecord
from scenarios.prefix_eviction import HitRateCompare, ProbeCache
from tests.support.row_builders import record
from tests.support.summary_builders import case, phase

MS = 1_000_000


def rec(phase: str, index: int, group: str | None, cached: int | None, ttft_ms: int) -> ReadRecord:
    return record(
        **{
            "request_id": f"{phase}-{index:04d}",
            "phase": phase,
            "index": index,
            "group": group,
            "status": "ok",
            "prompt_tokens_sent": 1056,
            "cached_tokens": cached,
            "sent_ns": 0,
            "chunk_ns": [ttft_ms * MS, (ttft_ms + 5) * MS],
            "chunk_tokens": [1, 1],
        }
    )


def test_first_request_per_group_by_index_not_by_file_order() -> None:
    # Records finish (and are written) out of order; index decides who the probe is.
    records = [
        rec("revisit", 5, "anchors-1", 1024, 20),
        rec("revisit", 2, "anchors-0", 1024, 21),
        rec("revisit", 1, "anchors-1", 0, 300),  # probe of anchors-1
        rec("revisit", 0, "anchors-0", None, 310),  # probe of anchors-0, no cached count
        rec("warm", 3, "anchors-1", 1024, 19),
        rec("warm", 1, "anchors-1", 1024, 22),  # probe of anchors-1
        rec("warm", 0, "anchors-0", 1024, 23),  # probe of anchors-0
        rec("pollution", 0, None, 0, 400),  # no group: never a probe
        rec("cold", 0, "anchors-0", 0, 500),  # phase not asked for
    ]
    rows = probe_rows(request_frame(records), ("warm", "revisit"))
    assert [r.model_dump() for r in rows] == [
        {
            "phase": "warm",
            "group": "anchors-0",
            "request_id": "warm-0000",
            "status": "ok",
            "cached_tokens": 1024,
            "prompt_tokens": 1056,
            "ttft_ms": 23.0,
        },
        {
            "phase": "warm",
            "group": "anchors-1",
            "request_id": "warm-0001",
            "status": "ok",
            "cached_tokens": 1024,
            "prompt_tokens": 1056,
            "ttft_ms": 22.0,
        },
        {
            "phase": "revisit",
            "group": "anchors-0",
            "request_id": "revisit-0000",
            "status": "ok",
            "cached_tokens": None,
            "prompt_tokens": 1056,
            "ttft_ms": 310.0,
        },
        {
            "phase": "revisit",
            "group": "anchors-1",
            "request_id": "revisit-0001",
            "status": "ok",
            "cached_tokens": 0,
            "prompt_tokens": 1056,
            "ttft_ms": 300.0,
        },
    ]


def test_failed_probe_is_still_the_probe_with_no_ttft() -> None:
    failed = msgspec.structs.replace(
        rec("warm", 0, "anchors-0", None, 0), status="error", chunk_ns=[], chunk_tokens=[]
    )
    rows = probe_rows(request_frame([failed, rec("warm", 4, "anchors-0", 1024, 20)]), ("warm",))
    assert [(r.request_id, r.status, r.ttft_ms) for r in rows] == [("warm-0000", "error", None)]


def test_no_records_no_probes() -> None:
    assert probe_rows(pd.DataFrame(), ("warm",)) == []


# -- verdicts -----------------------------------------------------------------------------

GENERIC_RATES = {"cold": 0.889, "warm": 0.970, "revisit": 0.889}


def details(rates: dict[str, float | None], probes: list[Probe]) -> PrefixEvictionDetails:
    hit_rates = {
        name: HitRates(hit_rate_counters=r, hit_rate_requests=r, lifetime_hit_rate_at_end=None)
        for name, r in rates.items()
    }
    return PrefixEvictionDetails(
        cases={"a": PrefixCase(phases=hit_rates, probes=probes, ratios=[],
                               lifetime_hit_rate=None)}
    )  # fmt: skip


def probes(phase_name: str, cached: list[int | None]) -> list[Probe]:
    return [
        Probe(phase=phase_name, group=f"anchors-{i}", request_id=f"{phase_name}-{i}",
              status="ok", cached_tokens=c, prompt_tokens=1056, ttft_ms=1.0)
        for i, c in enumerate(cached)
    ]  # fmt: skip


def one(check: object, d: PrefixEvictionDetails) -> Verdict:
    summary = case("a", *(phase(n) for n in d.cases["a"].phases))
    [verdict] = evaluate((check,), {"a": summary}, REPORT, d)  # type: ignore[arg-type]
    return verdict


def test_probe_hit_passes_when_every_probe_has_enough_cached_tokens() -> None:
    d = details({"warm": 0.97}, probes("warm", [1024, 1024, 512, 1024]))
    v = one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512), d)
    assert v == Verdict(
        case="a", check="warm probes hit", passed=True,
        detail="4/4 probes hit (cached tokens ≥ 512); cached tokens: [1024, 1024, 512, 1024]",
    )  # fmt: skip


def test_probe_hit_fails_on_one_short_or_missing_probe() -> None:
    d = details({"warm": 0.97}, probes("warm", [1024, 511, None]))
    v = one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512), d)
    assert v.passed is False
    assert v.detail.startswith("1/3 probes hit")


def test_probe_miss_passes_only_at_or_below_the_maximum() -> None:
    check = ProbeCache(case="a", phase="revisit", expect="miss", max_cached_tokens=0)
    assert one(check, details({"revisit": 0.9}, probes("revisit", [0, 0, 0, 0]))).passed is True
    assert one(check, details({"revisit": 0.9}, probes("revisit", [0, 128, 0]))).passed is False


def test_probe_check_without_probes_in_the_phase_is_undecided() -> None:
    v = one(
        ProbeCache(case="a", phase="warm", expect="hit"),
        details({"warm": 0.97}, probes("rewarm", [1024])),
    )
    assert (v.passed, v.detail) == (None, "no probe requests recorded in warm")


def test_hit_rate_below() -> None:
    d = details(GENERIC_RATES, [])
    # 0.889 < 0.970 − 0.02 = 0.950 → pass; with tolerance 0.1: 0.889 < 0.870 is false → fail.
    passing = HitRateCompare(case="a", phase="revisit", other="warm", relation="below")
    v = one(passing, d)
    assert (v.passed, v.check) == (True, "revisit hit rate below warm")
    assert v.detail == "revisit 0.889 vs warm 0.970 (tolerance 0.02)"
    assert one(passing.model_copy(update={"tolerance": 0.1}), d).passed is False


def test_hit_rate_close() -> None:
    d = details(GENERIC_RATES, [])
    close = HitRateCompare(case="a", phase="revisit", other="cold", relation="close")
    far = HitRateCompare(case="a", phase="revisit", other="warm", relation="close")
    assert one(close, d).passed is True  # |0.889 − 0.889| = 0 ≤ 0.02
    assert one(far, d).passed is False  # |0.889 − 0.970| = 0.081 > 0.02


def test_hit_rate_with_a_missing_rate_is_undecided() -> None:
    d = details({"warm": 0.970, "revisit": None}, [])
    v = one(HitRateCompare(case="a", phase="revisit", other="warm", relation="below"), d)
    assert (v.passed, v.detail) == (None, "revisit n/a vs warm 0.970 (tolerance 0.02)")


def test_probes_without_cached_token_counts_are_undecided_and_name_the_flag() -> None:
    # vLLM without --enable-prompt-tokens-details: every probe succeeded, none has a count.
    check = ProbeCache(case="a", phase="cold", expect="miss", why="the cold phase must start cold")
    v = one(check, details({"cold": 0.5}, probes("cold", [None, None])))
    assert v.passed is None
    assert v.detail == (
        "0/2 probes miss (cached tokens ≤ 0), 2 cannot tell; cached tokens: [None, None] — "
        "cannot decide: probe(s) without a cached-token count: cold-0, cold-1; the server did "
        "not report usage.prompt_tokens_details.cached_tokens (vLLM reports it only when "
        "started with --enable-prompt-tokens-details)"
    )  # no "must start cold" advice: nothing says the server held these prefixes


def test_a_failed_probe_leaves_a_check_the_others_pass_undecided() -> None:
    good, failed = probes("warm", [1024, None])
    failed = failed.model_copy(update={"status": "error"})
    v = one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512),
            details({"warm": 0.97}, [good, failed]))  # fmt: skip
    assert (v.passed, v.detail) == (
        None,
        "1/2 probes hit (cached tokens ≥ 512), 1 cannot tell; cached tokens: [1024, None] — "
        "cannot decide: probe(s) that did not succeed: warm-1 (error)",
    )
    # A decided probe that breaks the rule fails the check whatever the failed one did.
    short = good.model_copy(update={"cached_tokens": 100})
    assert one(ProbeCache(case="a", phase="warm", expect="hit", min_cached_tokens=512),
               details({"warm": 0.97}, [short, failed])).passed is False  # fmt: skip
