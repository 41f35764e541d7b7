"""bench's plan from a dataset: the rows it sends, what sizing records, and the workload hash
that a gate compares (it must change with the dataset's content)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.compare_runs import workload_hash
from scenarios.bench import Bench, BenchParams
from server.capacity import KVCapacity

NOMINAL = KVCapacity(18_688, 128, 146, 2**30, "metrics")
PROMPTS = Path(__file__).parent.parent / "fixtures" / "bench_prompts.jsonl"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded model's tokenizer, built into a temp dir (a few seconds)."""
    from server.embedded_model import build_tokenizer

    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    build_tokenizer(out)
    yield out


def _plan(dataset: Path, tokenizer: Path, **extra: object):  # type: ignore[no-untyped-def]
    params = BenchParams(
        url="http://127.0.0.1:8000", dataset=str(dataset), tokenizer=str(tokenizer),
        endpoint="chat", requests=4, concurrency="1,2", **extra,
    )  # fmt: skip
    return Bench().plan(params, NOMINAL)


def test_phases_take_consecutive_rows(tokenizer: Path) -> None:
    """Warm-up 2, then 4 per phase: rows 0-1, 2-5 and 6-9 of the 16 shipped prompts."""
    plan = _plan(PROMPTS, tokenizer, warmup_requests=2)
    assert [p.name for p in plan.phases] == ["warmup", "c1", "c2"]
    rows = [[i.row for i in p.workload.items] for p in plan.phases]  # type: ignore[union-attr]
    assert rows == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert plan.sizing["dataset_rows_read"] == 16
    assert plan.sizing["dataset_rows_skipped_too_long"] == 0
    assert [c.kind for c in plan.checks].count("bench_exact_concurrency") == 2


def test_workload_hash_follows_the_dataset_content(tokenizer: Path, tmp_path: Path) -> None:
    """Same content under another name: same hash (the prompts are in the plan); one prompt
    changed: another hash (the prompts and the file's sha256 differ)."""
    copy = tmp_path / "copy.jsonl"
    copy.write_text(PROMPTS.read_text())
    changed = tmp_path / "changed.jsonl"
    lines = PROMPTS.read_text().splitlines()
    changed.write_text("\n".join([json.dumps({"prompt": "something else"}), *lines[1:]]) + "\n")
    base = workload_hash(_plan(PROMPTS, tokenizer))
    assert workload_hash(_plan(copy, tokenizer)) == base
    assert workload_hash(_plan(changed, tokenizer)) != base


def test_bad_dataset_is_a_usage_error_before_any_load(tmp_path: Path, tokenizer: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_token_ids": [1, 2]}\n')
    with pytest.raises(ValueError, match="token IDs cannot go to the chat endpoint"):
        BenchParams(dataset=str(bad), tokenizer=str(tokenizer), endpoint="chat")
