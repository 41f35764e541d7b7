"""A reduced overload on the real embedded vLLM: its own admission limit rejects with 503 and
counts every rejection by reason, the gateway in front relays those 503s without its breaker
opening, and every planned request ends once.

One server of its own (256 MiB, max_num_seqs 4, ``--max-num-queued-reqs 2``), shared by the
two arms: ``vllm-reqs:2`` directly and ``gateway:4`` in front of it (the gateway forwards up to
4, vLLM refuses beyond 2, so the client sees vLLM's 503 through the gateway). A given rate of
4 req/s at 2× for 4 s (1 s warm-up), given SLOs: no saturation phase. About 60 s with the
server start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.load import load_run
from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import read_report, run_scenario

pytestmark = pytest.mark.vllm

LOAD = "load-2.00x"


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "overload",
        "--cache", "256MiB",
        "--max-num-seqs", "4",
        "--admission", "vllm-reqs:2,gateway:4",
        "--sustainable-rate", "4",
        "--slo", "ttft=2s,tpot=500ms",
        "--overload", "2",
        "--duration", "4s",
        "--warmup", "1s",
        "--unloaded-requests", "3",
        "--settle-s", "0.6",
    )  # fmt: skip


def test_vllm_rejects_beyond_its_limit_and_counts_each_rejection(reduced_run: Path) -> None:
    run = load_run(reduced_run)
    case = next(c for c in run.cases if c.name == "vllm-reqs-2")
    assert "--max-num-queued-reqs" in case.info.case["server"]["extra_args"]
    records = [r for r in case.records if r.phase == LOAD]
    answered = [r for r in records if r.http_status == 503]
    # vLLM 0.32 may also refuse once the stream began: an error event inside the 200
    in_stream = [r for r in records if r.http_status == 200 and r.status == "error"]
    assert answered, "32 requests at 8 req/s against 2 in flight: some must be refused"
    assert all("cannot accept new requests" in (r.error or "") for r in answered + in_stream)
    assert all(r.retry_after is None for r in answered)  # vLLM 0.32 sends none
    details = read_report(reduced_run)["details"]
    (point,) = [p for p in details["points"] if p["arm"] == "vllm-reqs-2"]
    # vLLM's counter over the whole phase = the client's refusals over the whole phase
    assert point["vllm_rejections"]["max_num_queued_reqs"] == len(answered) + len(in_stream)
    assert set(point["reasons"]) <= {
        "HTTP 503 max_num_queued_reqs", "HTTP 200 max_num_queued_reqs",
    }  # fmt: skip
    assert sum(point["reasons"].values()) == point["rejected"] and not point["failures"]


def test_the_gateway_relays_vllm_rejections_without_opening_its_breaker(
    reduced_run: Path,
) -> None:
    run = load_run(reduced_run)
    case = next(c for c in run.cases if c.name == "gateway-4")
    records = [r for r in case.records if r.phase == LOAD]
    assert "--max-num-queued-reqs" in case.info.case["server"]["extra_args"]
    relayed = [r for r in records if r.status == "error" and r.http_status in (200, 503)]
    assert relayed, "the gateway forwards 4 while vLLM takes 2: vLLM's refusals come through"
    assert all("cannot accept new requests" in (r.error or "") for r in relayed)
    assert not any(t.to_state == "open" for t in case.transitions), case.transitions
    assert all(r.http_status in (200, 429, 503) for r in records)


def test_every_request_ends_once_and_rejections_are_fast(reduced_run: Path) -> None:
    verdicts = {v["check"]: v for v in read_report(reduced_run)["verdicts"]}
    accounted = next(v for k, v in verdicts.items() if k.startswith("every planned request"))
    assert accounted["passed"] is True, accounted["detail"]
    fast = next(
        v for k, v in verdicts.items() if k.startswith("the recommended limit's rejections")
    )
    assert fast["passed"] is True, fast["detail"]


def test_the_report_page_shows_what_the_report_says(reduced_run: Path, tmp_path: Path) -> None:
    check_report_page(reduced_run, tmp_path)
