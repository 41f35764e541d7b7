"""bench's "N requests sent" check on a phase cut short: the user's Ctrl-C leaves it
undecided (as "no failures" is), a dead server or a short send still fails it."""

from __future__ import annotations

from analysis.models import CaseSummary, PhaseSummary
from analysis.reports.bench import BenchCase, BenchDetails, _sent
from analysis.reports.bench.figures import BenchPhase
from analysis.summaries import INTERRUPTED, SERVER_DIED
from scenarios.bench import RequestsSent


def _verdict(not_sent: int, incomplete: str | None) -> bool | None:
    phase = BenchPhase(
        phase="c4", load="closed loop C=4", concurrency=4, rate_rps=None, requests=16,
        ok=16 - not_sent, failed=0, aborted=0, not_sent=not_sent, interrupted=0,
        duration_s=1.0, input_tokens=0, output_tokens=0, request_throughput_req_s=None,
        input_throughput_tok_s=None, output_throughput_tok_s=None,
        total_token_throughput_tok_s=None,
    )  # fmt: skip
    details = BenchDetails(slo={}, cases=[BenchCase(case="attached", phases=[phase])])
    summary = PhaseSummary.model_construct(incomplete=incomplete)
    case = CaseSummary.model_construct(phases={"c4": summary})
    return _sent(RequestsSent(case="attached", phase="c4", requests=16), case, details).passed


def test_a_phase_cut_by_the_user_is_undecided_not_failed() -> None:
    assert _verdict(not_sent=10, incomplete=INTERRUPTED) is None  # 6 of 16 sent, then Ctrl-C


def test_a_dead_server_or_a_short_send_still_fails_and_a_full_send_passes() -> None:
    assert _verdict(not_sent=10, incomplete=SERVER_DIED.format(reason="x")) is False
    assert _verdict(not_sent=1, incomplete=None) is False
    assert _verdict(not_sent=0, incomplete=None) is True
    assert _verdict(not_sent=0, incomplete=INTERRUPTED) is True  # all 16 went before the cut
