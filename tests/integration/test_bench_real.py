"""bench on the real embedded vLLM: one short closed-loop phase to /v1/completions with
synthetic token IDs and one to /v1/chat/completions with the shipped text prompts, attached
to the session's shared 1 GiB server (about a minute for both)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm

PROMPTS = Path(__file__).parent.parent / "fixtures" / "bench_prompts.jsonl"


def _passed(run: Path) -> dict:
    report = read_report(run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    validate = loadgen("validate", str(run))
    assert validate.returncode == 0, validate.stdout + validate.stderr
    return report


def test_completions_closed_loop(
    tmp_path_factory: pytest.TempPathFactory, server_1gib: SharedServer
) -> None:
    """12 requests of 128 token IDs + 48 exact output tokens at C = 4: every verdict passes
    (12 sent, exactly 4 in flight by the client's records and the server's gauges, outputs
    exact, no failures); the prompt lengths the server counted are the ones sent. 48 tokens
    keep the phase a few seconds long, so scrapes fall while 4 stream (at 16 tokens it was
    about a second, and a late scraper could miss the whole steady part)."""
    run = run_scenario(
        tmp_path_factory, "bench", "--url", server_1gib.url, "--requests", "12",
        "--concurrency", "4", "--input-len", "128", "--output-len", "48",
    )  # fmt: skip
    report = _passed(run)
    (phase,) = report["details"]["cases"][0]["phases"]
    assert phase["input_tokens"] == 12 * 128 and phase["output_tokens"] == 12 * 48
    check_report_page(run, tmp_path_factory.mktemp("page"))
    assert phase["prompt_lengths_differing"] == 0


def test_chat_dataset(tmp_path_factory: pytest.TempPathFactory, server_1gib: SharedServer) -> None:
    """The 16 shipped text prompts to the chat endpoint at C = 4, 48 output tokens each:
    every verdict passes; TTFT is stamped at the first content token (vLLM's role chunk
    carries none: with ignore_eos each record holds exactly 48 tokens over its chunks), and
    the chat-template lengths measured with the embedded tokenizer equal the server's usage."""
    run = run_scenario(
        tmp_path_factory, "bench", "--url", server_1gib.url, "--requests", "16",
        "--concurrency", "4", "--endpoint", "chat", "--dataset", str(PROMPTS),
        "--output-len", "48",
    )  # fmt: skip
    report = _passed(run)
    (phase,) = report["details"]["cases"][0]["phases"]
    assert phase["ok"] == 16 and phase["prompt_lengths_differing"] == 0
    records = [
        json.loads(line)
        for line in (run / "cases/attached/requests.jsonl").read_text().splitlines()
    ]
    assert all(sum(r["chunk_tokens"]) == 48 and r["token_timing"] == "usage" for r in records)
    export = loadgen("export", str(run), "--format", "vllm-bench")
    assert export.returncode == 0, export.stderr
    # The server's own /tokenize agrees with the plan's count for the first prompt.
    plan = json.loads((run / "plan.json").read_text())
    item = plan["phases"][0]["workload"]["items"][0]
    messages = [{"role": r, "content": c} for r, c in item["messages"]]
    answer = httpx.post(
        f"{server_1gib.url}/tokenize",
        json={"model": server_1gib.model_name, "messages": messages, "add_generation_prompt": True},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["count"] == item["prompt_tokens"]
