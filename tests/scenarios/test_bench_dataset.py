"""bench's dataset files: JSONL rows, ShareGPT conversations, too-long rows skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scenarios.bench_dataset import DatasetError, read_rows, select


class WordTokenizer:
    """One token per whitespace-separated word; a chat template adds 2 tokens a message
    (a role marker and an end) and 1 for the generation prompt."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> list[int]:
        words = sum(len(m["content"].split()) + 2 for m in conversation)
        return list(range(words + 1))


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_too_long_row_skipped_and_counted(tmp_path: Path) -> None:
    """Context 100: a 20-word prompt + 10 output fits; a 95-word prompt + 10 does not (105 >
    100) and is skipped and counted; a 50-token-ID row with its own output of 40 fits (90)."""
    path = _write_jsonl(
        tmp_path / "d.jsonl",
        [{"prompt": "w " * 20}, {"prompt": "w " * 95}, {"prompt_token_ids": list(range(50)),
                                                        "output_tokens": 40}],
    )  # fmt: skip
    rows = read_rows(path, "first", WordTokenizer())
    chosen = select(
        rows, total=2, endpoint="completions", tokenizer=WordTokenizer(), max_model_len=100,
        default_output_tokens=10, use_row_output=True, shuffle=False, seed=0,
    )  # fmt: skip
    assert chosen.skipped_too_long == 1
    assert [i.row for i in chosen.items] == [0, 2]
    assert [(i.prompt_tokens, i.output_tokens) for i in chosen.items] == [(20, 10), (50, 40)]
    assert not chosen.reused


def test_fewer_rows_than_requests_are_reused(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a b"}, {"prompt": "c d e"}])
    chosen = select(
        read_rows(path, "first", WordTokenizer()), total=5, endpoint="chat",
        tokenizer=WordTokenizer(), max_model_len=100, default_output_tokens=4,
        use_row_output=True, shuffle=False, seed=0,
    )  # fmt: skip
    assert [i.row for i in chosen.items] == [0, 1, 0, 1, 0]
    # chat: 2 words + 2 (message) + 1 (generation prompt) = 5; 3 + 2 + 1 = 6
    assert [i.prompt_tokens for i in chosen.items[:2]] == [5, 6]
    assert chosen.items[0].messages == (("user", "a b"),)
    assert chosen.reused


def _sharegpt(path: Path) -> Path:
    path.write_text(
        json.dumps(
            [
                {"id": "a", "conversations": [
                    {"from": "human", "value": "hi there"},
                    {"from": "gpt", "value": "hello how are you"},
                    {"from": "human", "value": "fine thanks"},
                    {"from": "gpt", "value": "good"},
                ]},
                {"id": "b", "conversations": [
                    {"from": "system", "value": "be brief"},
                    {"from": "human", "value": "one two three"},
                    {"from": "gpt", "value": "four five"},
                ]},
            ]
        )
    )  # fmt: skip
    return path


def test_sharegpt_first_turns(tmp_path: Path) -> None:
    """Two conversations → two rows: each first user turn; the output length is the reply's
    word count (4 and 2); conversation b keeps its system message before the user turn."""
    rows = read_rows(_sharegpt(tmp_path / "s.json"), "first", WordTokenizer())
    assert [r.messages for r in rows] == [
        (("user", "hi there"),),
        (("system", "be brief"), ("user", "one two three")),
    ]
    assert [r.output_tokens for r in rows] == [4, 2]


def test_sharegpt_every_turn_with_history(tmp_path: Path) -> None:
    """Every user turn with its history: conversation a gives 2 rows (the second with the
    first exchange before it), b gives 1; 3 in all."""
    rows = read_rows(_sharegpt(tmp_path / "s.json"), "all", WordTokenizer())
    assert len(rows) == 3
    assert rows[1].messages == (
        ("user", "hi there"), ("assistant", "hello how are you"), ("user", "fine thanks"),
    )  # fmt: skip
    assert rows[1].output_tokens == 1
    chosen = select(
        rows, total=3, endpoint="chat", tokenizer=WordTokenizer(), max_model_len=100,
        default_output_tokens=8, use_row_output=True, shuffle=False, seed=0,
    )  # fmt: skip
    # row 1: (2+2) + (4+2) + (2+2) + 1 = 15 tokens through the template
    assert chosen.items[1].prompt_tokens == 15
    with pytest.raises(DatasetError, match="needs --endpoint chat"):
        select(
            rows, total=3, endpoint="completions", tokenizer=WordTokenizer(), max_model_len=100,
            default_output_tokens=8, use_row_output=True, shuffle=False, seed=0,
        )  # fmt: skip


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"text": "x"}', "exactly one of"),
        ('{"prompt": "x", "output_tokens": 0}', "positive integer"),
        ('{"prompt_token_ids": ["a"]}', "list of integers"),
        ("not json", "not JSON"),
    ],
)
def test_bad_rows_are_named(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(DatasetError, match=why) as exc:
        read_rows(path, "first", WordTokenizer())
    assert "line 2" in str(exc.value)
