"""disconnect-abort's report: time to free, wasted tokens and zombie time, from hand-made
records and samples."""

from __future__ import annotations

import pytest

from analysis.checks import evaluate
from analysis.load import CaseData
from analysis.reports.disconnect_abort.report import REPORT, DisconnectDetails, disconnect_row
from loadgen.runformat import CaseInfo, ReadRecord
from metrics.samples import Sample
from scenarios.disconnect_abort import DisconnectFreesServer, OrphansRunOn
from tests.support.row_builders import phase_row, record
from tests.support.summary_builders import case, phase

S = 1_000_000_000  # ns per s
M = (("model_name", "m"),)


def _record(i: int, sent: int, tokens: int, max_tokens: int, disconnect: int | None) -> ReadRecord:
    chunks = [sent + (k + 1) * S // 10 for k in range(tokens)]
    return record(**{
        "request_id": f"r{i}", "phase": "abort", "sent_ns": sent, "chunk_ns": chunks,
        "chunk_tokens": [1] * tokens, "max_tokens": max_tokens, "disconnect_ns": disconnect,
        "end_ns": disconnect or chunks[-1], "status": "aborted" if disconnect else "ok",
    })  # fmt: skip


def _case(running: list[float], generated: list[float], records: list[dict]) -> CaseData:
    """Samples every 0.5 s from t = 0; the phase runs from 1 s to 6 s."""
    samples = []
    for k, (run, gen) in enumerate(zip(running, generated, strict=True)):
        t = k * S // 2
        samples += [
            Sample(t, "num_requests_running", M, run),
            Sample(t, "generation_tokens", M, gen),
            Sample(t, "kv_cache_usage_perc", M, 0.1 * run),
        ]
    return CaseData("c", CaseInfo(), records, [], samples, [])


PHASE = phase_row(phase="abort", start_ns=1 * S, last_end_ns=2 * S, end_ns=6 * S)


def test_a_propagated_disconnect_frees_the_server_at_the_next_scrape() -> None:
    # Two requests sent at 1.0 s, each receives 5 tokens (by 1.5 s) and disconnects at 1.6 s.
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    #             t=0  0.5  1.0  1.5  2.0  2.5 ... 6.0
    running = [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    generated = [0, 0, 0, 10, 12, 12, 12, 12, 12, 12, 12, 12, 12]
    row = disconnect_row(_case(running, generated, records), PHASE)
    assert row is not None
    assert row.time_to_free_s == pytest.approx(0.4)  # scrape at 2.0 s − disconnect at 1.6 s
    assert row.received_tokens == 10
    assert row.wasted_tokens == 2  # Δgenerated 12 − received 10
    assert row.orphan_budget_tokens == 190  # 2 × (100 − 5)
    assert row.zombie_s == 0.0
    assert row.running_after_last_disconnect == 0


def test_orphans_that_run_on_are_wasted_tokens_and_zombie_time() -> None:
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    running = [0, 0, 0, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0]  # busy until 4.5 s
    generated = [0, 0, 0, 10, 40, 80, 120, 160, 190, 200, 200, 200, 200]
    row = disconnect_row(_case(running, generated, records), PHASE)
    assert row is not None
    assert row.time_to_free_s == pytest.approx(2.9)  # 4.5 − 1.6
    assert row.wasted_tokens == 190  # 200 − 10: every remaining token generated for nobody
    assert row.wasted_fraction == pytest.approx(1.0)
    # Running > 0 with no client open: from the 2.0 s scrape until the 4.5 s one.
    assert row.zombie_s == pytest.approx(2.5)
    assert row.kv_release_s == pytest.approx(2.9)


def test_requests_still_open_at_the_client_are_not_counted_as_orphans() -> None:
    # One request disconnects at 1.6 s, the other stays connected until its 20 tokens (3.0 s).
    records = [_record(0, 1 * S, 5, 100, 16 * S // 10), _record(1, 1 * S, 20, 20, None)]
    running = [0, 0, 0, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    generated = [0, 0, 0, 10, 15, 20, 25, 25, 25, 25, 25, 25, 25]
    row = disconnect_row(_case(running, generated, records), PHASE)
    assert row is not None
    assert row.disconnected == 1
    assert row.time_to_free_s == pytest.approx(0.4)  # 1 running = 1 client still open
    assert row.wasted_tokens == 0  # 25 generated, 5 + 20 received
    assert row.orphan_budget_tokens == 95


def test_no_disconnect_gives_no_row() -> None:
    records = [_record(0, 1 * S, 5, 5, None)]
    assert disconnect_row(_case([0] * 13, [0] * 13, records), PHASE) is None


def test_kv_usage_of_two_engines_is_judged_by_the_larger_not_the_sum() -> None:
    # Engines at 0.3 and 0.2 KV usage while busy (scrapes at 1.5 s and 2.0 s), 0.0 from 2.5 s.
    # The first scrape after the 1.6 s disconnect (2.0 s) shows 0.3, the larger engine, never
    # the sum 0.5; release and free are seen at 2.5 s, 0.9 s after the disconnect.
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    samples = []
    for k in range(13):
        t = k * S // 2
        busy = k in (3, 4)
        for engine, kv in (("0", 0.3), ("1", 0.2)):
            labels = (("engine", engine), *M)
            samples.append(Sample(t, "kv_cache_usage_perc", labels, kv if busy else 0.0))
            samples.append(Sample(t, "num_requests_running", labels, 1.0 if busy else 0.0))
        samples.append(Sample(t, "generation_tokens", M, 10.0 if k >= 3 else 0.0))
    row = disconnect_row(CaseData("c", CaseInfo(), records, [], samples, []), PHASE)
    assert row is not None
    assert row.kv_after_last_disconnect == 0.3
    assert row.kv_release_s == pytest.approx(0.9)
    assert row.running_after_last_disconnect == 2.0  # running is a count: summed over engines
    assert row.time_to_free_s == pytest.approx(0.9)


def _verdicts(row_case: CaseData) -> list[tuple[bool | None, str]]:
    row = disconnect_row(row_case, PHASE)
    assert row is not None
    checks = (DisconnectFreesServer(case="c", phase="abort", within_s=1.0),
              OrphansRunOn(case="c", phase="abort"))  # fmt: skip
    found = evaluate(
        checks, {"c": case("c", phase("abort"))}, REPORT, DisconnectDetails(rows=[row])
    )
    return [(v.passed, v.detail) for v in found]


def test_no_running_sample_after_the_last_disconnect_is_undecided_not_never_free() -> None:
    # Scrapes stop at 1.5 s (the scraper died): nothing after the 1.6 s disconnect shows
    # whether the server freed. Δgenerated over [1 s, 6 s] = 10 − 0, all received: wasted 0.
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    frees, _ = _verdicts(_case([0, 0, 0, 2], [0, 0, 0, 10], records))
    assert frees == (
        None,
        "server not sampled after the last disconnect; wasted 0 of a 190 token orphan budget "
        "(0.0 %, limit 10%); "
        "cannot decide: no num_requests_running sample between the last disconnect and the "
        "phase's end",
    )


def test_a_server_seen_busy_after_the_disconnect_fails_on_that_evidence() -> None:
    # Running stays 2 at every scrape from 1.5 s to 6 s: seen busy, so FAIL.
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    running = [0, 0, 0] + [2] * 10
    frees, _ = _verdicts(_case(running, [0, 0, 0] + [10] * 10, records))
    assert frees[0] is False and frees[1].startswith("server never seen free")


def test_without_a_generation_counter_the_wasted_fraction_decides_nothing() -> None:
    # The server exposes no generation_tokens samples: wasted tokens are unknown, not 0.
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    full = _case([0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0] * 13, records)
    full.samples = [s for s in full.samples if s.name != "generation_tokens"]
    frees, orphans = _verdicts(full)
    assert frees[0] is None and frees[1].endswith("no generation_tokens delta over the phase")
    assert orphans == (
        None,
        "wasted – of a 190 token orphan budget (– %, expected ≥ 80%); zombie time 0.0 s; "
        "cannot decide: no generation_tokens delta over the phase",
    )


def _with_prompts(row_case: CaseData, prompt_each: int, counted: list[float]) -> CaseData:
    """Every record sent ``prompt_each`` prompt tokens; the server's prompt_tokens counter
    reads ``counted`` at the scrapes (every 0.5 s from t = 0)."""
    for r in row_case.records:
        r.prompt_tokens_sent = prompt_each
    row_case.samples += [Sample(k * S // 2, "prompt_tokens", M, v) for k, v in enumerate(counted)]
    return row_case


def test_another_clients_traffic_makes_the_checks_undecided_not_failed() -> None:
    # Two requests of 256 prompt tokens (512 sent); the counter rises by 1,536 over the phase
    # window [1 s, 6 s]: 1,024 came from someone else, whose requests also keep running at 2
    # after the disconnects and whose tokens raise Δgenerated to 60 (10 received).
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    shared = _with_prompts(
        _case([0, 0, 0] + [2] * 10, [0, 0, 0] + [10, 20, 30, 40, 50] + [60] * 5, records),
        256,
        [0, 0, 0] + [512, 1024] + [1536] * 8,
    )
    row = disconnect_row(shared, PHASE)
    assert row is not None and row.prompt_tokens == 1536 and row.prompt_tokens_sent == 512
    (frees, frees_detail), (orphans, orphans_detail) = _verdicts(shared)
    because = (
        "cannot decide: the server served other traffic during the phase "
        "(Δprompt_tokens 1536, this phase sent 512)"
    )
    assert frees is None and frees_detail.endswith(because)
    assert orphans is None and orphans_detail.endswith(because)


def test_a_server_that_counted_only_this_phases_prompts_is_judged_as_usual() -> None:
    records = [_record(i, 1 * S, 5, 100, 16 * S // 10) for i in range(2)]
    alone = _with_prompts(
        _case([0, 0, 0, 2] + [0] * 9, [0, 0, 0, 10, 12] + [12] * 8, records),
        256,
        [0, 0, 0] + [512] * 10,
    )
    (frees, _), (orphans, _) = _verdicts(alone)
    assert frees is True and orphans is False  # freed at 2.0 s; 2 of 190 wasted
