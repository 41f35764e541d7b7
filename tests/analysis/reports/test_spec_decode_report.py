"""spec-decode's report on a synthetic run whose every figure is computed by hand
(``tests/support/spec_decode_run.py`` describes the run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.load import load_run
from analysis.report import build_report, summarize_run
from analysis.reports.spec_decode.acceptance import break_even_alpha
from analysis.reports.spec_decode.figures import SpecDecodeDetails, SpecRow, answer_line
from analysis.reports.spec_decode.report import REPORT
from scenarios.spec_decode import PerPositionNonIncreasing, PerPositionSumsToAccepted
from tests.support.spec_decode_run import build_run


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SpecDecodeDetails]:
    run_dir = tmp_path_factory.mktemp("spec") / "run"
    run_dir.mkdir()
    build_run(run_dir)
    report = build_report(run_dir)
    return run_dir, report.details


def _row(details: SpecDecodeDetails, case: str) -> SpecRow:
    row = details.row(case, "c1")
    assert row is not None
    return row


#: k = 3; random draft: TPOT 20 ms at τ = 1 against 16 ms: c = (20 / 16 − 1) / 3 = 0.25 / 3.
C_RANDOM = 0.25 / 3


def test_acceptance_from_the_counters(built: tuple[Path, SpecDecodeDetails]) -> None:
    _, details = built
    ngram = _row(details, "ngram")
    # drafts 4, draft tokens 12, accepted 10, per position 4, 4, 2:
    # α = 10 / 12, τ = 1 + 10 / 4 = 3.5, per position 1.0, 1.0, 0.5; conditional 1.0, 1.0, 0.5.
    assert ngram.alpha == pytest.approx(10 / 12)
    assert ngram.tau == pytest.approx(3.5)
    assert ngram.per_position == pytest.approx([1.0, 1.0, 0.5])
    assert ngram.conditional == pytest.approx([1.0, 1.0, 0.5])
    # Decode tokens 18 − 2 = 16; steps 16 − 10 = 6, of which 6 − 4 = 2 without proposals.
    assert ngram.decode_steps == 6
    assert ngram.steps_without_drafts == 2
    assert ngram.tau_all_steps == pytest.approx(16 / 6)
    echo = _row(details, "draft-echo")
    # drafts 6, draft tokens 18, accepted 10: α = 0.556, τ = 1 + 10 / 6 = 2.667, every step
    # proposed (steps 16 − 10 = 6 = drafts), conditional 4/6, 4/4, 2/4.
    assert echo.alpha == pytest.approx(10 / 18)
    assert echo.tau == pytest.approx(1 + 10 / 6)
    assert echo.steps_without_drafts == 0
    assert echo.tau_all_steps == pytest.approx(echo.tau)
    assert echo.conditional == pytest.approx([4 / 6, 1.0, 0.5])
    random = _row(details, "draft-random")
    assert (random.alpha, random.tau, random.per_position) == (0.0, 1.0, [0.0, 0.0, 0.0])
    assert _row(details, "baseline").alpha is None


def test_client_chunks_and_itl(built: tuple[Path, SpecDecodeDetails]) -> None:
    _, details = built
    ngram = _row(details, "ngram")
    # 2 requests × chunks of 1, 4, 3 tokens: 16 tokens in 6 decode chunks = 2.667, as τ over
    # every step; ITL per token: 24 ms once, four 6 ms, three 8 ms per request → mean
    # (24 + 24 + 24) / 8 = 9 ms, p50 between the 4th and 5th of 6,6,6,6,8,8,8,24 = 7 ms;
    # chunk gap 24 ms each.
    assert ngram.client.chunks == 6
    assert ngram.client.tokens_per_chunk == pytest.approx(16 / 6)
    assert ngram.chunk_vs_tau_all_steps == pytest.approx(0.0)
    assert ngram.chunk_vs_tau == pytest.approx((16 / 6) / 3.5 - 1)
    assert ngram.client.itl_token_ms.mean == pytest.approx(9.0)
    assert ngram.client.itl_token_ms.p50 == pytest.approx(7.0)
    assert ngram.client.chunk_gap_ms.mean == pytest.approx(24.0)
    assert ngram.tpot_mean_ms == pytest.approx(9.0)


def test_merged_read_is_counted_and_matched_to_the_scrape(
    built: tuple[Path, SpecDecodeDetails],
) -> None:
    _, details = built
    base = _row(details, "baseline").client
    # 8 + 7 decode chunks carrying 16 tokens; the one 2-token chunk is a merge (a step
    # delivers 1 token), a scrape started in its gap and in no other chunk's.
    assert (base.chunks, base.tokens, base.step_max) == (15, 16, 1)
    assert base.tokens_per_chunk == pytest.approx(16 / 15)
    assert base.merged_token_share == pytest.approx(1 / 16)
    assert (base.over_step, base.over_step_scrape) == (1, 1)
    assert base.other_scrape_share == 0.0
    # The 2-token chunk's 32 ms gives two 16 ms ITL values: every value is 16 ms.
    assert (base.itl_token_ms.mean, base.itl_token_ms.p99) == (16.0, 16.0)


def test_speedup_model_against_measured(built: tuple[Path, SpecDecodeDetails]) -> None:
    _, details = built
    random, echo, ngram = (_row(details, c) for c in ("draft-random", "draft-echo", "ngram"))
    assert random.c == pytest.approx(C_RANDOM)
    assert random.c_implied == pytest.approx(C_RANDOM)
    assert random.measured_speedup == pytest.approx(16 / 20)
    assert random.predicted_speedup == pytest.approx(1 / 1.25)  # E(0) = 1, k·c + 1 = 1.25
    # The echo draft has the random one's size: c from draft-random. E(10/18) = 1 + a + a² + a³.
    a = 10 / 18
    assert echo.c == pytest.approx(C_RANDOM)
    assert echo.expected_tokens == pytest.approx(1 + a + a**2 + a**3)
    assert echo.predicted_speedup == pytest.approx((1 + a + a**2 + a**3) / 1.25)
    assert echo.predicted_from_steps == pytest.approx((1 + 10 / 6) / 1.25)
    assert echo.measured_speedup == pytest.approx(16 / 11.25)
    assert echo.measured_over_predicted == pytest.approx(
        (16 / 11.25) / ((1 + a + a**2 + a**3) / 1.25)
    )
    # Implied cost: a step takes 11.25 ms × 2.667 tokens = 30 ms against 16: (1.875 − 1) / 3.
    assert echo.c_implied == pytest.approx(0.875 / 3)
    # Break-even: 1 + α + α² + α³ = 1.25 → α* ≈ 0.2013 (Newton from 0.2); τ* = 1.25.
    assert echo.break_even_alpha == pytest.approx(0.2013, abs=1e-4)
    assert echo.break_even_tau == pytest.approx(1.25)
    # n-gram: c = 0 by assumption; its implied cost: 9 ms × 16/6 tokens = 24 ms per step.
    assert ngram.c == 0.0
    assert ngram.c_implied == pytest.approx((24 / 16 - 1) / 3)
    assert ngram.break_even_alpha == 0.0
    assert ngram.break_even_alpha_implied == pytest.approx(break_even_alpha(3, 0.5 / 3))
    assert ngram.measured_speedup == pytest.approx(16 / 9)


def test_outcomes_with_hysteresis_and_the_answer_lines(
    built: tuple[Path, SpecDecodeDetails],
) -> None:
    run_dir, details = built
    # Band 0.05: ×1.78 and ×1.42 pay, ×0.80 does not.
    assert _row(details, "ngram").outcome == "pays"
    assert _row(details, "draft-echo").outcome == "pays"
    assert _row(details, "draft-random").outcome == "does not pay"
    echo = _row(details, "draft-echo")
    # α_off / α_on: predicted speedup 0.95 / 1.05 → E = 1.1875 / 1.3125; between them α*.
    assert echo.alpha_off is not None and echo.alpha_on is not None
    assert echo.alpha_off < (echo.break_even_alpha or 0) < echo.alpha_on
    assert details.answers[1] == (
        "draft-random: speculation does not pay at concurrency 1: measured speedup ×0.80, "
        "acceptance α 0.000 (τ 1.00), break-even α 0.201 (τ 1.25)"
    )
    assert details.answers[2] == (
        "draft-echo: speculation pays at concurrency 1: measured speedup ×1.42, "
        "acceptance α 0.556 (τ 2.67), break-even α 0.201 (τ 1.25)"
    )
    assert details.answers[0].startswith(
        "ngram: speculation pays at concurrency 1: measured speedup ×1.78, acceptance α 0.833 "
        "(τ 3.50), break-even α 0.000 (τ 1.00), "
    )
    # The report ends with those lines.
    text = (run_dir / "report.md").read_text()
    assert text.rstrip().endswith(details.answers[-1])


def test_every_verdict_passes_on_the_synthetic_run(built: tuple[Path, SpecDecodeDetails]) -> None:
    run_dir, _ = built
    verdicts = summarize_run(load_run(run_dir)).summary.verdicts
    assert verdicts and all(v.passed for v in verdicts), [v for v in verdicts if not v.passed]
    details = {v.check: v.detail for v in verdicts if v.case == "ngram"}
    assert details["faster than baseline in c1 (TPOT)"] == (
        "TPOT mean 9.00 ms vs 16.00 ms: measured speedup ×1.78"
    )


def test_checks_fail_on_rising_rates_and_counts_that_do_not_add_up(
    built: tuple[Path, SpecDecodeDetails],
) -> None:
    _, details = built
    row = _row(details, "draft-echo")
    # Per position 0.5, 0.6, 0.1: a rise of 0.1 > 0.02; 3 + 4 + 1 = 8 ≠ 10 accepted.
    bad = row.model_copy(
        update={"per_position": [0.5, 0.6, 0.1], "accepted_per_position": [3.0, 4.0, 1.0]}
    )
    broken = details.model_copy(update={"rows": [bad]})
    rising = PerPositionNonIncreasing(case="draft-echo", phase="c1")
    sums = PerPositionSumsToAccepted(case="draft-echo", phase="c1")
    assert REPORT.evaluators[PerPositionNonIncreasing](rising, None, broken).passed is False
    verdict = REPORT.evaluators[PerPositionSumsToAccepted](sums, None, broken)
    assert verdict.passed is False
    assert verdict.detail == "3 + 4 + 1 = 8 vs accepted 10"


def test_without_a_baseline_the_answer_says_so() -> None:
    row = SpecRow.model_validate(
        {"case": "attached", "kind": "attached", "phase": "c1", "concurrency": 1, "k": 3,
         "requests_ok": 1, "tpot_mean_ms": 5.0, "tpot_p50_ms": 5.0, "tpot_p95_ms": 5.0,
         "ttft_mean_ms": 1.0, "output_tok_s": 1.0, "preemptions": 0.0,
         "client": {"chunks": 1, "tokens": 1, "tokens_per_chunk": 1.0, "step_max": 4,
                    "over_step": 0, "over_step_scrape": 0, "other_scrape_share": None,
                    "merged_token_share": 0.0, "itl_token_ms": {}, "chunk_gap_ms": {}}}
    )  # fmt: skip
    assert answer_line("attached", [row]) == (
        "attached: no baseline at concurrency 1: speedup not measured"
    )


def test_the_case_by_concurrency_table_leads_the_scenario_section(
    built: tuple[Path, SpecDecodeDetails],
) -> None:
    run_dir, _ = built
    text = (run_dir / "report.md").read_text()
    section = text[text.index("## Speculative decoding per case and concurrency") :]
    # The ngram row, by hand: α 10/12, τ 3.5, per position 4/4, 4/4, 2/4 (above); each request
    # 9 tokens in 123 ms (50 ms TTFT + 3 × 24 ms + 1 ms), so 18 / 0.246 s = 73.2 tok/s; TPOT and
    # ITL per token 9 ms, chunk gap 24 ms; measured 16 / 9 = 1.78; predicted E(10/12) at c = 0
    # = 1 + a + a² + a³ = 3.106 → 3.11; measured ÷ predicted 1.778 / 3.106 = 0.57.
    assert (
        "| ngram | 1 | 0.833 | 3.50 | 1.000 / 1.000 / 0.500 | 73.2 | 9.00 | 9.00 | 24.00 | 1.78 "
        "| 3.11 | 0.57 |"
    ) in section.split("###")[0]
    # Then the model, acceptance per position, the client's latency, chunks and merged reads.
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert headings[:5] == [
        "### The speedup model",
        "### Acceptance per position",
        "### Client side: ITL per token and per chunk",
        "### Client tokens per chunk against the server's τ",
        "### Merged reads",
    ]
