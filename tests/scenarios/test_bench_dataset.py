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


class CountingTokenizer(WordTokenizer):
    """WordTokenizer with a vocabulary whose longest entry is 5 characters and no normaliser
    (what ``chars_per_token_bound`` reads from a ``transformers`` tokenizer); it counts the
    characters it was asked to tokenise."""

    class _Backend:
        normalizer = None

    backend_tokenizer = _Backend()

    def __init__(self) -> None:
        self.chars_seen = 0

    def get_vocab(self) -> dict[str, int]:
        return {"a": 0, "ab": 1, "abcde": 2}

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        self.chars_seen += len(text)
        return super().__call__(text, add_special_tokens)


def test_a_row_that_cannot_fit_is_skipped_without_being_tokenised(tmp_path: Path) -> None:
    # Tokens of at most 5 characters and a context of 100: a text of more than 500 characters
    # is more than 100 tokens whatever it says. Row 0 (500 chars) is measured (250 words, too
    # long: skipped); row 1 (502 chars) and row 2 (10 MB) are skipped unmeasured; row 3 fits.
    path = _write_jsonl(
        tmp_path / "d.jsonl",
        [{"prompt": "w " * 250}, {"prompt": "w " * 251}, {"prompt": "x" * 10**7},
         {"prompt": "a b"}],
    )  # fmt: skip
    tokenizer = CountingTokenizer()
    chosen = select(
        read_rows(path, "first", tokenizer), total=1, endpoint="completions",
        tokenizer=tokenizer, max_model_len=100, default_output_tokens=1, use_row_output=True,
        shuffle=False, seed=0,
    )  # fmt: skip
    assert chosen.skipped_too_long == 3
    assert [i.row for i in chosen.items] == [3]
    assert tokenizer.chars_seen == 500 + 3


def test_a_sharegpt_reply_that_cannot_fit_is_not_tokenised(tmp_path: Path) -> None:
    # A reply of 10 MB with a context of 100: its length is the bound ceil(10**7 / 5) = 2 M
    # tokens, more than the context, without tokenising it; the short reply is measured.
    path = tmp_path / "s.json"

    def conversation(reply: str) -> dict[str, object]:
        turns = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": reply}]
        return {"conversations": turns}

    path.write_text(json.dumps([conversation("x" * 10**7), conversation("a b c")]))
    tokenizer = CountingTokenizer()
    rows = read_rows(path, "first", tokenizer, max_model_len=100)
    assert [r.output_tokens for r in rows] == [2_000_000, 3]
    assert tokenizer.chars_seen == 5


def test_a_line_over_the_limit_is_refused_by_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scenarios.bench_dataset.DATASET_MAX_LINE_BYTES", 100)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "w" * 200}])
    with pytest.raises(DatasetError) as exc:
        read_rows(path, "first", WordTokenizer())
    assert str(exc.value) == f"{path} line 2: longer than 100 bytes, the limit of one line"


@pytest.mark.parametrize("shape", ["jsonl", "sharegpt"])
def test_a_file_over_the_limit_is_refused_without_being_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    monkeypatch.setattr("scenarios.bench_dataset.DATASET_MAX_BYTES", 1000)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a " * 50}] * 10)  # 10 × 111 bytes
    if shape == "sharegpt":
        path = _sharegpt(tmp_path / "s.json")
        path.write_text(path.read_text() + " " * 1000)
    with pytest.raises(DatasetError) as exc:
        read_rows(path, "first", WordTokenizer())
    assert str(exc.value) == f"{path}: larger than 1,000 bytes, the limit of a dataset"


def test_a_file_of_zeros_is_refused_at_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16 MiB + 1 of NUL bytes (sparse): one line that never ends, stopped by the file limit.
    zeros = tmp_path / "zeros.jsonl"
    with open(zeros, "wb") as fh:
        fh.truncate(2**24 + 1)
    monkeypatch.setattr("scenarios.bench_dataset.DATASET_MAX_BYTES", 2**24)
    with pytest.raises(DatasetError) as exc:
        read_rows(zeros, "first", WordTokenizer())
    assert str(exc.value) == f"{zeros}: larger than 16,777,216 bytes, the limit of a dataset"


def test_dev_zero_is_refused_as_a_device_before_a_byte_is_read() -> None:
    # It exists (the message once said "no such file"), and it is no dataset: a device.
    with pytest.raises(DatasetError, match=r"/dev/zero: .*is a character device, not a regular"):
        read_rows(Path("/dev/zero"), "first", WordTokenizer())
