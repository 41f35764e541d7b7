"""Dataset files for ``bench``: reading rows, measuring them in tokens, choosing the ones sent.

Two formats, told apart by content:

- **JSONL**, one object a line, each with exactly one of ``prompt`` (text), ``messages``
  (``[{"role", "content"}, …]``, chat) or ``prompt_token_ids`` (a list of ints), and an
  optional output length (``output_tokens`` or ``output_len``);
- **ShareGPT** JSON, a list of ``{"conversations": [{"from": "human"|"gpt"|…, "value"}]}``:
  ``first`` turns = each conversation's first user turn (vLLM bench's reading), ``all`` =
  every user turn with the conversation before it as history; the output length is the
  token count of the reply that follows it (none after the last turn).

Rows are measured with the server's tokenizer (a local copy: ``transformers`` from a model or
tokenizer directory), the chat template applied for chat prompts, so a prompt's length is in
the server's tokens; each response's usage confirms it. Rows whose prompt + output exceed the
context are skipped and counted, never truncated. A row whose text cannot fit in any case
(more characters than the context times the longest token of the vocabulary) is skipped
without being tokenised, which for a row of megabytes costs seconds and gigabytes.

A file is read with bounds (``server.net.input_files``): at most :data:`DATASET_MAX_BYTES` in
all and :data:`DATASET_MAX_LINE_BYTES` a JSONL line; a larger file or a longer line is refused
with its name or line number, never read whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from scenarios.bench_workload import BenchItem, Endpoint
from scenarios.common import MAX_TOKEN_ID
from server.net.input_files import InputTooLarge, iter_lines, read_bounded

SharegptTurns = Literal["first", "all"]
#: Largest dataset file (1 GiB = 2**30 bytes): ShareGPT V3, the largest in common use, is
#: about 640 MB.
DATASET_MAX_BYTES = 2**30
#: Longest JSONL line (16 MiB = 2**24 bytes): about four million tokens of text, beyond any
#: served context; a row under it that cannot fit is skipped, not tokenised
#: (:func:`chars_per_token_bound`).
DATASET_MAX_LINE_BYTES = 2**24
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
          "chatgpt": "assistant", "bard": "assistant", "system": "system"}  # fmt: skip


class DatasetError(ValueError):
    """A dataset file that cannot be read as JSONL or ShareGPT; the message names the row."""


@dataclass(frozen=True)
class DatasetRow:
    """One prompt read from a file, not yet measured: ``text``, ``messages`` or ``token_ids``,
    and the output length the file gave (``None``: none)."""

    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    token_ids: tuple[int, ...] | None = None
    output_tokens: int | None = None


class Tokenizer(Protocol):
    """What measuring rows needs (``transformers`` tokenizers have both)."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> Any: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def content_sha256(path: Path) -> str:
    """sha256 (hex) of the file's bytes, read 1 MiB at a time: the plan records it, so the
    workload hash changes with the dataset's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _jsonl_row(obj: Any, where: str) -> DatasetRow:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: not a JSON object")
    kinds = [k for k in ("prompt", "messages", "prompt_token_ids") if k in obj]
    if len(kinds) != 1:
        raise DatasetError(f"{where}: needs exactly one of prompt, messages, prompt_token_ids")
    out = obj.get("output_tokens", obj.get("output_len"))
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out <= 0):
        raise DatasetError(f"{where}: output length must be a positive integer, got {out!r}")
    value = obj[kinds[0]]
    if kinds[0] == "prompt":
        if not isinstance(value, str) or not value:
            raise DatasetError(f"{where}: prompt must be non-empty text")
        return DatasetRow(text=value, output_tokens=out)
    if kinds[0] == "messages":
        if not isinstance(value, list) or not value:
            raise DatasetError(f"{where}: messages must be a non-empty list")
        pairs = []
        for m in value:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise DatasetError(f"{where}: each message needs a role and text content")
            pairs.append((str(m.get("role", "user")), m["content"]))
        return DatasetRow(messages=tuple(pairs), output_tokens=out)
    if not isinstance(value, list) or not value or not all(type(x) is int for x in value):
        raise DatasetError(f"{where}: prompt_token_ids must be a non-empty list of integers")
    bad = next(((i, x) for i, x in enumerate(value) if not 0 <= x < MAX_TOKEN_ID), None)
    if bad is not None:  # 10^20 was taken and failed every request at the server
        raise DatasetError(f"{where}: prompt_token_ids[{bad[0]}] = {bad[1]} is no token ID "
                           f"(0 to {MAX_TOKEN_ID - 1})")  # fmt: skip
    return DatasetRow(token_ids=tuple(value), output_tokens=out)


def _reply_tokens(tokenizer: Tokenizer, text: str, max_model_len: int | None) -> int:
    """A reply's length in tokens; for a reply that cannot fit the context, unmeasured, the
    lower bound of :func:`chars_per_token_bound` (more than ``max_model_len``)."""
    bound = chars_per_token_bound(tokenizer)
    if bound is not None and max_model_len is not None and len(text) > bound * max_model_len:
        return -(-len(text) // bound)
    return max(1, len(tokenizer(text, add_special_tokens=False)["input_ids"]))


def _sharegpt_rows(
    data: list[Any], turns: SharegptTurns, tokenizer: Tokenizer, path: Path,
    max_model_len: int | None,
) -> list[DatasetRow]:  # fmt: skip
    rows = []
    for n, conv in enumerate(data):
        turns_of = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns_of, list):
            raise DatasetError(f"{path} item {n}: no 'conversations' list (ShareGPT format)")
        history: list[tuple[str, str]] = []
        for k, turn in enumerate(turns_of):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise DatasetError(f"{path} item {n} turn {k}: needs 'from' and text 'value'")
            role = _ROLES.get(str(turn.get("from", "")).lower())
            if role is None:
                raise DatasetError(
                    f"{path} item {n} turn {k}: unknown speaker {turn.get('from')!r}"
                )
            history.append((role, turn["value"]))
            if role != "user":
                continue
            reply = turns_of[k + 1] if k + 1 < len(turns_of) else None
            out = None
            if isinstance(reply, dict) and _ROLES.get(str(reply.get("from", "")).lower()) == (
                "assistant"
            ):
                out = _reply_tokens(tokenizer, str(reply.get("value", "")), max_model_len)
            rows.append(DatasetRow(messages=tuple(history), output_tokens=out))
            if turns == "first":
                break
    return rows


def read_rows(
    path: Path, turns: SharegptTurns, tokenizer: Tokenizer, max_model_len: int | None = None
) -> list[DatasetRow]:
    """Every row of ``path`` in file order (ShareGPT: one per chosen user turn; a reply that
    cannot fit ``max_model_len`` is not tokenised, see :func:`_reply_tokens`).

    Raises:
        DatasetError: the file is missing, unreadable, larger than :data:`DATASET_MAX_BYTES`,
            empty, or a row breaks the format or is longer than
            :data:`DATASET_MAX_LINE_BYTES` (named).
    """
    try:
        if _starts_with_bracket(path):
            text = read_bounded(path, DATASET_MAX_BYTES, "a dataset").decode("utf-8")
            rows = _sharegpt_rows(_json(text, str(path)), turns, tokenizer, path, max_model_len)
        else:
            rows = _jsonl_rows(path)
    except InputTooLarge as exc:
        raise DatasetError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc}") from None
    if not rows:
        raise DatasetError(f"{path}: no prompts in it")
    return rows


def _starts_with_bracket(path: Path) -> bool:
    """Whether the first non-blank byte of ``path`` (within its first 1 MiB) is ``[``."""
    with open(path, "rb") as fh:
        return fh.read(2**20).lstrip().startswith(b"[")


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise DatasetError(f"{where}: nested too deeply to read") from None
    except ValueError as exc:
        raise DatasetError(f"{where}: not JSON ({exc})") from None


def _jsonl_rows(path: Path) -> list[DatasetRow]:
    rows = []
    lines = iter_lines(
        path, max_line_bytes=DATASET_MAX_LINE_BYTES, max_bytes=DATASET_MAX_BYTES, what="a dataset"
    )
    for n, raw in lines:
        where = f"{path} line {n}"
        if raw is None:
            raise DatasetError(
                f"{where}: longer than {DATASET_MAX_LINE_BYTES:,} bytes, the limit of one line"
            )
        line = raw.decode("utf-8")
        if line.strip():
            rows.append(_jsonl_row(_json(line, where), where))
    return rows


def prompt_length(row: DatasetRow, endpoint: Endpoint, tokenizer: Tokenizer) -> int:
    """``row``'s prompt in tokens as the server counts it for ``endpoint``: token IDs as
    they are; text to ``/v1/completions`` with the tokenizer's special tokens (as vLLM
    encodes a text prompt); chat through the chat template with the generation prompt."""
    if row.token_ids is not None:
        return len(row.token_ids)
    if endpoint == "completions":
        assert row.text is not None
        return len(tokenizer(row.text)["input_ids"])
    conversation = [{"role": r, "content": c} for r, c in _messages(row)]
    ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _messages(row: DatasetRow) -> tuple[tuple[str, str], ...]:
    if row.messages is not None:
        return row.messages
    assert row.text is not None
    return (("user", row.text),)


def chars_per_token_bound(tokenizer: Tokenizer) -> int | None:
    """The most characters of text one token of ``tokenizer`` stands for, when that has a
    bound: the longest entry of its vocabulary (an entry spells at least the characters it
    covers: one symbol a byte for byte-level BPE, ``▁`` a space for SentencePiece). ``None``
    for a tokenizer with a normaliser (one may shrink the text first, e.g. collapse runs of
    spaces) or without a readable vocabulary.

    So a text of ``c`` characters is at least ``c / bound`` tokens: a row over
    ``bound × max_model_len`` characters cannot fit, and is skipped unmeasured.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if backend is None or getattr(backend, "normalizer", None) is not None or get_vocab is None:
        return None
    vocab = get_vocab()
    return max(map(len, vocab)) if vocab else None


def _text_chars(row: DatasetRow) -> int:
    """Characters of ``row``'s text (0 for token IDs)."""
    if row.text is not None:
        return len(row.text)
    return sum(len(content) for _, content in row.messages or ())


@dataclass(frozen=True)
class Selection:
    """The rows chosen for a run.

    Attributes:
        items: the measured prompts, in sending order (``total`` of them; rows reused in
            order when the file has fewer usable ones than that).
        rows_read: rows in the file (ShareGPT: user turns chosen).
        skipped_too_long: rows whose prompt + output exceed the context.
        reused: whether some rows are sent more than once.
    """

    items: tuple[BenchItem, ...]
    rows_read: int
    skipped_too_long: int
    reused: bool


def select(
    rows: Sequence[DatasetRow],
    *,
    total: int,
    endpoint: Endpoint,
    tokenizer: Tokenizer,
    max_model_len: int,
    default_output_tokens: int,
    use_row_output: bool,
    shuffle: bool,
    seed: int,
) -> Selection:
    """Measure rows in order (shuffled by ``seed`` first with ``shuffle``), skip the
    too-long ones (unmeasured when their text alone cannot fit: :func:`chars_per_token_bound`),
    and take ``total`` (cycling over the usable rows when there are fewer).

    Raises:
        DatasetError: a row does not suit ``endpoint`` (token IDs to chat, history to
            completions) or no row fits the context.
    """
    order = np.arange(len(rows))
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(rows))
    usable: list[BenchItem] = []
    skipped = 0
    bound = chars_per_token_bound(tokenizer)
    for position in order.tolist():
        row = rows[position]
        if endpoint == "chat" and row.token_ids is not None:
            raise DatasetError(f"row {position}: token IDs cannot go to the chat endpoint")
        if endpoint == "completions" and row.messages is not None:
            if len(row.messages) != 1 or row.messages[0][0] != "user":
                raise DatasetError(
                    f"row {position}: a conversation needs --endpoint chat (completions "
                    "takes one prompt)"
                )
            row = DatasetRow(text=row.messages[0][1], output_tokens=row.output_tokens)
        if bound is not None and _text_chars(row) > bound * max_model_len:
            skipped += 1  # cannot fit: not tokenised (chars_per_token_bound)
            continue
        output = row.output_tokens if use_row_output and row.output_tokens else None
        output = output or default_output_tokens
        prompt = prompt_length(row, endpoint, tokenizer)
        if prompt + output > max_model_len:
            skipped += 1
            continue
        usable.append(
            BenchItem(
                row=position,
                prompt_text=row.text if endpoint == "completions" else None,
                messages=_messages(row) if endpoint == "chat" else None,
                prompt_token_ids=row.token_ids,
                prompt_tokens=prompt,
                output_tokens=output,
            )
        )
        if len(usable) == total:
            break
    if not usable:
        raise DatasetError(
            f"no row fits the context of {max_model_len} tokens ({skipped} too long)"
        )
    items = tuple(usable[i % len(usable)] for i in range(total))
    return Selection(items, len(rows), skipped, reused=len(usable) < total)


def load_tokenizer(directory: Path) -> Tokenizer:
    """The ``transformers`` tokenizer saved in ``directory`` (a model or tokenizer dir).

    Raises:
        DatasetError: it cannot be loaded.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer: Tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:  # transformers raises many kinds for a bad directory
        raise DatasetError(f"cannot load a tokenizer from {directory}: {exc}") from None
    return tokenizer
