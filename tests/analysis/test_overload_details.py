"""overload's figures on hand-made records: completions, rejections and failures counted by
hand, every latency from the scheduled time, vLLM's rejection counter by reason."""

from __future__ import annotations

import pytest

from analysis.load import CaseData
from analysis.reports.overload.details import load_point, recommendations, valid_retry_after
from analysis.reports.overload.models import ArmLimit, LoadPoint
from loadgen.runformat import CaseInfo, PhaseRow, ReadRecord
from metrics.samples import Sample
from scenarios.arrivals import OpenLoop
from scenarios.plan import PhaseSpec
from scenarios.workloads import UniquePrompts

S = 1_000_000_000
MS = 1_000_000
T0 = 100 * S
TOKENS = b"The engine has reached its prefill token backlog limit."
SPEC = PhaseSpec(
    name="load-2.00x",
    workload=UniquePrompts(prompt_tokens=8, output_tokens=4, requests=None),
    arrival=OpenLoop(rate_rps=5.0, duration_s=2.0),
)


def _record(i: int, scheduled_ns: int, **fields: object) -> ReadRecord:
    return ReadRecord(
        request_id=f"load-2.00x-{i}", case="arm", phase="load-2.00x", index=i, group=None,
        prompt_tokens_sent=8, max_tokens=4, scheduled_ns=scheduled_ns, **fields,
    )  # fmt: skip


def _ok(i: int, late_ms: int = 0, ttft_ms: int = 50, gap_ms: int = 10) -> ReadRecord:
    """Completed: sent ``late_ms`` after its schedule, first token ``ttft_ms`` after the
    send, then three more tokens ``gap_ms`` apart (TPOT = gap)."""
    t = T0 + i * 200 * MS
    sent = t + late_ms * MS
    chunks = [sent + (ttft_ms + k * gap_ms) * MS for k in range(4)]
    return _record(i, t, sent_ns=sent, chunk_ns=chunks, chunk_tokens=[1] * 4,
                   end_ns=chunks[-1], http_status=200, status="ok")  # fmt: skip


def _refused(i: int, status: int, body: str, after_ms: int, retry: str | None) -> ReadRecord:
    t = T0 + i * 200 * MS
    return _record(i, t, sent_ns=t, end_ns=t + after_ms * MS, http_status=status,
                   status="error", error=f"HTTP {status}: {body}", retry_after=retry)  # fmt: skip


def _case() -> CaseData:
    records = [
        *(_ok(i) for i in range(4)),  # good: TTFT 50 ms, TPOT 10 ms
        _ok(4, late_ms=80),  # TTFT 50 ms from its send, 130 ms from its schedule: not good
        _ok(5, gap_ms=30),  # TPOT 30 ms: not good
        _refused(6, 503, TOKENS.decode(), 5, None),  # vLLM's 503: no Retry-After
        _refused(7, 503, TOKENS.decode(), 15, "soon"),  # a bad Retry-After, kept as sent
        _refused(8, 429, '{"error": {"type": "overloaded"}}', 40, "1"),  # the gateway's
        _record(9, T0 + 1800 * MS, sent_ns=T0 + 1800 * MS, end_ns=T0 + 1900 * MS,
                http_status=500, status="error", error="HTTP 500: boom"),  # a failure
        _ok(10),  # scheduled at t0 + 2 s: outside the window [t0, t0 + 2 s)
    ]  # fmt: skip
    rejections = [
        Sample(T0 - 1, "admission_rejections", (("reason", "max_num_queued_tokens"),), 3.0),
        Sample(T0 + 3 * S, "admission_rejections", (("reason", "max_num_queued_tokens"),), 5.0),
        Sample(T0 + S, "kv_cache_usage_perc", (("engine", "0"),), 0.5),
    ]
    row = PhaseRow(phase="load-2.00x", start_ns=T0, last_end_ns=T0 + 2 * S + 100 * MS,
                   end_ns=T0 + 3 * S, requests=11, resolved={"rate_rps": 5.0})  # fmt: skip
    return CaseData(name="arm", info=CaseInfo(), records=records, phases=[row],
                    samples=rejections, scrapes=[])  # fmt: skip


def test_a_load_counted_by_hand() -> None:
    """Window [t0, t0 + 2 s): records 0-9. Completed 0-5 (6), good 0-3 (4: record 4 is late
    from its schedule, record 5 too slow per token), rejected 6-8 (3), failed 9 (1).
    Goodput 4 ÷ 2 s = 2 req/s; completed 3 req/s; attainment 4 ÷ (6 + 1) admitted;
    rejected 3 of 10. Rejection latencies 5, 15, 40 ms: p50 15, p99 15 + 0.98 × 25 = 39.5."""
    got = load_point("arm", 2.0, SPEC, _case(), (100.0, 20.0))
    assert got is not None
    point, accounting = got
    assert (point.counted, point.completed, point.rejected, point.failed, point.good) == (
        10, 6, 3, 1, 4,
    )  # fmt: skip
    assert point.goodput_rps == pytest.approx(2.0)
    assert point.completed_rps == pytest.approx(3.0)
    assert point.attainment == pytest.approx(4 / 7)
    assert point.rejected_share == pytest.approx(0.3)
    assert point.reasons == {"HTTP 503 max_num_queued_tokens": 2, "HTTP 429 gateway_queue_full": 1}
    assert point.failures == {"error: HTTP 500: boom": 1}
    assert point.rejection_p50_ms == pytest.approx(15.0)
    assert point.rejection_p99_ms == pytest.approx(39.5)
    assert (point.retry_after, point.retry_after_valid) == (2, 1)
    assert point.vllm_rejections == {"max_num_queued_tokens": 2.0}
    assert point.kv_usage_peak == 0.5
    assert point.offered_rps == 5.0
    assert accounting.whole and (accounting.records, accounting.planned) == (11, 11)


def test_latency_counts_from_the_schedule_not_the_send() -> None:
    """The same late request judged with a 100 ms TTFT bound: its 50 ms from dispatch would
    pass, its 130 ms from the schedule does not; with a 150 ms bound it is good."""
    case = _case()
    case.records = [_ok(4, late_ms=80)]
    strict = load_point("arm", 2.0, SPEC, case, (100.0, None))
    loose = load_point("arm", 2.0, SPEC, case, (150.0, None))
    assert strict is not None and loose is not None
    assert (strict[0].good, loose[0].good) == (0, 1)
    assert strict[0].ttft_p50_ms == pytest.approx(130.0)
    assert strict[0].send_lateness_p99_ms == pytest.approx(80.0)


def test_a_lost_or_doubled_request_breaks_the_accounting() -> None:
    case = _case()
    case.records = [*case.records[:-1], case.records[0]]  # record 10 lost, record 0 twice
    got = load_point("arm", 2.0, SPEC, case, (100.0, 20.0))
    assert got is not None
    assert (got[1].duplicates, got[1].records, got[1].whole) == (1, 11, False)


@pytest.mark.parametrize(
    ("value", "valid"),
    [("1", True), ("120", True), ("Wed, 21 Oct 2015 07:28:00 GMT", True), ("soon", False),
     ("-1", False), ("1.5", False), ("", False)],
)  # fmt: skip
def test_retry_after_validity(value: str, valid: bool) -> None:
    assert valid_retry_after(value) is valid


def _point(arm: str, load: float, goodput: float, attainment: float) -> LoadPoint:
    return LoadPoint(
        arm=arm, phase=f"load-{load:.2f}x", load=load, offered_rps=None, window_s=8.0,
        planned=0, counted=0, completed=0, rejected=0, failed=0, good=0, goodput_rps=goodput,
        completed_rps=0.0, attainment=attainment, rejected_share=0.0, reasons={}, failures={},
        rejection_p50_ms=None, rejection_p99_ms=None, retry_after=0, retry_after_valid=0,
        ttft_p50_ms=None, ttft_p99_ms=None, send_lateness_p99_ms=None, kv_usage_peak=None,
        waiting_peak=None, running_peak=None, vllm_rejections=None,
    )  # fmt: skip


def test_the_recommended_limit_meets_the_attainment_target_first() -> None:
    """At 2×: reqs-19 has the most goodput (5.0) but 60 % attainment; of the arms at ≥ 90 %,
    reqs-10 (4.5) beats reqs-5 (4.0): it is recommended, beside the rule's arm reqs-19. At 3×
    no arm reaches 90 %: the best goodput of all (reqs-5) is named, and the verdict will say
    its attainment. ``none`` is never a recommendation."""
    limits = [
        ArmLimit(arm="none", kind="none", flag=None, used=None, rule_of_thumb=None),
        *(ArmLimit(arm=f"vllm-reqs-{n}", kind="vllm-reqs", flag="--max-num-queued-reqs",
                   used=n, rule_of_thumb=19) for n in (5, 10, 19)),
    ]  # fmt: skip
    points = [
        _point("none", 2.0, 9.0, 1.0),
        _point("vllm-reqs-5", 2.0, 4.0, 0.95), _point("vllm-reqs-10", 2.0, 4.5, 0.92),
        _point("vllm-reqs-19", 2.0, 5.0, 0.6),
        _point("vllm-reqs-5", 3.0, 3.0, 0.8), _point("vllm-reqs-10", 3.0, 2.0, 0.5),
    ]  # fmt: skip
    two, three = recommendations(points, limits, 0.9)
    assert (two.arm, two.limit, two.goodput_rps) == ("vllm-reqs-10", 10, 4.5)
    assert (two.rule_arm, two.rule_limit, two.rule_goodput_rps) == ("vllm-reqs-19", 19, 5.0)
    assert (three.arm, three.limit) == ("vllm-reqs-5", 5)
