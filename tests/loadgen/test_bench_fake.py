"""bench against the fake server: chat streams, the count-bounded closed loop, extra body
fields and headers, and what the run files keep of a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import build_report
from loadgen.client import Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.connections import open_session
from loadgen.records import RequestRecord
from loadgen.redact import redact_command
from loadgen.run import run_scenario
from scenarios.bench import Bench, BenchParams
from scenarios.requests import PlannedRequest
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(120)]


def _chat_request(max_tokens: int) -> PlannedRequest:
    return PlannedRequest(
        request_id="r", prompt_token_ids=(), max_tokens=max_tokens, endpoint="chat",
        messages=(("user", "hello"),),
    )  # fmt: skip


@pytest.mark.parametrize("continuous_usage", [True, False])
async def test_chat_ttft_at_the_first_content_chunk(continuous_usage: bool) -> None:
    """The role chunk comes 50 ms after the request, an empty chunk right after it, the first
    token at 300 ms: TTFT must be ≥ 300 ms (the sleeps are lower bounds), not ≈ 50 ms, with
    the server's running usage (role and empty chunks show 0 completion tokens) and without
    it (role and empty chunks carry no text; the final usage of 4 equals the text chunks)."""
    script = StreamScript(
        ttft_s=0.3, itl_s=0.01, chat_role_delay_s=0.05, chat_empty_chunk=True,
        continuous_usage=continuous_usage,
    )  # fmt: skip
    fake = FakeOpenAIServer(script)
    clock = MonotonicClock()
    record = RequestRecord("r", "c", "p", 0, None, 5, 4, clock.now_ns())
    async with (
        fake.serve(),
        open_session(read_timeout_s=5, total_timeout_s=10, pool_limit=4) as session,
    ):
        await send_request(session, Target(fake.url, "m"), _chat_request(4), record, clock)
    assert fake.seen[0].path == "/v1/chat/completions"
    assert fake.seen[0].body["max_completion_tokens"] == 4
    assert record.status == "ok", record.error
    assert record.chunk_tokens == [1, 1, 1, 1]
    assert record.sent_ns is not None
    ttft_ms = (record.chunk_ns[0] - record.sent_ns) / 1e6
    assert ttft_ms >= 300, ttft_ms


async def test_closed_loop_n10_c3(tmp_path: Path) -> None:
    """N = 10 at C = 3: the fake never sees more than 3 at once, the phase has exactly 10
    records, and every verdict passes (each request takes ≥ 200 + 3 × 50 = 350 ms, so a
    100 ms scrape sees 3 running)."""
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.2, itl_s=0.05))
    async with fake.serve():
        params = BenchParams(
            url=fake.url, requests=10, concurrency="3", input_len=8, output_len=4,
            settle_s=0.2, scrape_interval_s=0.1,
        )  # fmt: skip
        result = await run_scenario(Bench(), params, tmp_path / "run")
    assert result.status == "ok", result.error
    assert fake.max_active == 3
    records = [
        json.loads(line)
        for line in (tmp_path / "run/cases/attached/requests.jsonl").read_text().splitlines()
    ]
    assert len([r for r in records if r["phase"] == "c3"]) == 10
    report = build_report(tmp_path / "run")
    failed = [v for v in report.summary.verdicts if v.passed is not True]
    assert not failed, failed
    assert (tmp_path / "run/plots/throughput_latency_attached.png").exists()
    assert "server attached (not started by this run)" in (tmp_path / "run/report.md").read_text()


async def test_extra_body_and_headers_reach_the_server(tmp_path: Path) -> None:
    """--extra-body fields are merged into every body beside the plan's (--temperature 0.5
    is the plan's), --header pairs arrive as headers; the secret value of X-Api-Key is in
    no run file while the harmless X-Trace value is kept."""
    fake = FakeOpenAIServer(StreamScript())
    async with fake.serve():
        params = BenchParams(
            url=fake.url, requests=2, concurrency="1", input_len=4, output_len=2,
            extra_body='{"priority": 3, "top_p": 0.5}', temperature=0.5,
            header=("X-Api-Key: sekrit-123", "X-Trace: abc"), settle_s=0.2,
            scrape_interval_s=0.1,
        )  # fmt: skip
        command = ["loadgen", "run", "bench", "--header", "X-Api-Key: sekrit-123"]
        result = await run_scenario(Bench(), params, tmp_path / "run", command=command)
    assert result.status == "ok", result.error
    completions = [seen for seen in fake.seen if seen.path == "/v1/completions"]
    assert len(completions) == fake.served > 0  # the rest: the attach's /v1/models
    for seen in completions:
        assert seen.body is not None
        assert seen.body["priority"] == 3 and seen.body["top_p"] == 0.5
        assert seen.body["temperature"] == 0.5
        assert seen.headers is not None
        assert seen.headers["X-Api-Key"] == "sekrit-123"
        assert seen.headers["X-Trace"] == "abc"
    build_report(tmp_path / "run")
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md"):
            assert "sekrit" not in path.read_text(), path
    assert "abc" in (tmp_path / "run/plan.json").read_text()


def test_redact_command() -> None:
    argv = ["run", "--header", "Authorization: Bearer x", "--header=X-Trace: 1",
            "--header=api-key:y", "--header", "X-JWT: j", "--header=X-Note: Bearer z",
            "--extra-body", '{"top_p": 1, "x": {"api_key": "k"}}', '--extra-body={"n": [1]}',
            "--header", "no colon secret", "--extra-body", "{not json"]  # fmt: skip
    assert redact_command(argv) == [
        "run", "--header", "Authorization: <redacted>", "--header=X-Trace: 1",
        "--header=api-key: <redacted>", "--header", "X-JWT: <redacted>",
        "--header=X-Note: <redacted>",
        "--extra-body", '{"top_p": 1, "x": {"api_key": "<redacted>"}}', '--extra-body={"n": [1]}',
        "--header", "<redacted>", "--extra-body", "<redacted>",
    ]  # fmt: skip


#: The fields ``vllm bench serve --save-result --percentile-metrics ttft,tpot,itl,e2el``
#: writes (vLLM 0.32 benchmarks/serve.py, without --save-detailed or --metadata).
VLLM_BENCH_FIELDS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests", "rtfx", "latencies", "queue_times",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for s in ("mean", "median", "std", "p99")),
}  # fmt: skip


async def test_export_formats(tmp_path: Path) -> None:
    """A closed loop of 6 at C = 2 (prompts of 8 token IDs, outputs of 4; first token after
    ≥ 100 ms, then ≥ 20 ms a token) exported three ways. By hand: 6 completed, 48 input and
    24 output tokens; TPOT ≥ 20 ms and E2EL ≥ 100 + 3 × 20 = 160 ms (sleeps are lower
    bounds); each throughput is its total ÷ the same duration (6, 24 and 48 + 24 = 72); under
    --slo ttft=10s every request is good, so goodput = request throughput."""
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.1, itl_s=0.02))
    async with fake.serve():
        params = BenchParams(
            url=fake.url, requests=6, concurrency="2", input_len=8, output_len=4,
            settle_s=0.2, scrape_interval_s=0.1, slo="ttft=10s",
        )  # fmt: skip
        result = await run_scenario(Bench(), params, tmp_path / "run")
    assert result.status == "ok", result.error
    from analysis.export import write_requests, write_vllm_bench

    run = tmp_path / "run"
    csv = pd.read_csv(write_requests(run, tmp_path / "r.csv", "csv"))
    parquet = pd.read_parquet(write_requests(run, tmp_path / "r.parquet", "parquet"))
    for table in (csv, parquet):
        assert len(table) == 6 and set(table["status"]) == {"ok"}
        assert (table["e2el_ms"] >= 160).all() and (table["tpot_ms"] >= 20).all()
    assert list(parquet["chunk_tokens"].iloc[0]) == [1, 1, 1, 1]
    (path,) = write_vllm_bench(run, tmp_path / "vb", (99,))
    got = json.loads(path.read_text())
    assert set(got) == VLLM_BENCH_FIELDS
    assert (got["completed"], got["failed"], got["num_prompts"]) == (6, 0, 6)
    assert (got["total_input_tokens"], got["total_output_tokens"]) == (48, 24)
    assert got["max_concurrency"] == 2 and got["request_rate"] == "inf"
    assert got["request_throughput"] == pytest.approx(6 / got["duration"])
    assert got["output_throughput"] == pytest.approx(24 / got["duration"])
    assert got["total_token_throughput"] == pytest.approx(72 / got["duration"])
    assert got["request_goodput"] == pytest.approx(got["request_throughput"])
    assert got["mean_tpot_ms"] >= 20 and got["median_e2el_ms"] >= 160
    assert len(got["latencies"]) == 6 and min(got["latencies"]) >= 0.16
    assert len(got["queue_times"]) == 6 and min(got["queue_times"]) >= 0
