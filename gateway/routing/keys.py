"""The routing key of a request: a stable 64-bit hash of its prompt's beginning.

Requests that share a prefix group (a system prompt, a conversation, an agent loop) share
their first blocks, so hashing those blocks sends a group to one replica, where vLLM's prefix
cache holds it. The key is built from what the request body carries:

- **Token IDs** (``/v1/completions`` with ``"prompt": [ids…]``, how the testbed sends exact
  token blocks): the first ``prefix_blocks`` full blocks of ``block_tokens`` tokens (128, vLLM
  CPU's block size: the unit the prefix cache stores), i.e. tokens
  ``[0, min(prefix_blocks, P // block_tokens) × block_tokens)``. A prompt shorter than one
  block is keyed by all its tokens (nothing of it is cached anyway: only full blocks are).
- **Text** (``"prompt": "…"``): its first ``prefix_chars`` characters (default 2,048: about
  four 128-token blocks at the ~4 characters per token of English BPE text).
- **Chat** (``"messages": […]``): the conversation written as ``role\\ncontent\\n`` per
  message (text parts of a content list joined, other parts as sorted JSON), then its first
  ``prefix_chars`` characters.
- A batch prompt (a list of prompts) is keyed by its first prompt. Anything else (no prompt,
  a malformed one) has no key (``None``); :class:`gateway.routing.router.Router` then places
  the request least-loaded.

The hash is BLAKE2b with an 8-byte digest (``hashlib``; never Python's per-process salted
``hash()``), personalised per kind so a token key and a text key never collide by
construction; token IDs are hashed as 4-byte little-endian unsigned integers, text as UTF-8.
The key is the digest read as a little-endian unsigned 64-bit integer: the same on every
machine and every run.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

#: Full blocks of token IDs a key covers (4 × 128 = the first 512 tokens).
DEFAULT_PREFIX_BLOCKS = 4
#: The block size the key counts in: vLLM CPU's KV block (tokens).
DEFAULT_BLOCK_TOKENS = 128
#: Characters of a text or chat prompt a key covers (≈ 4 blocks of 128 tokens × 4 chars).
DEFAULT_PREFIX_CHARS = 2048

_TOKENS = b"routing-tokens"
_TEXT = b"routing-text"
_MAX_TOKEN_ID = 2**32 - 1


def _digest(data: bytes, person: bytes) -> int:
    return int.from_bytes(
        hashlib.blake2b(data, digest_size=8, person=person).digest(), "little", signed=False
    )


def key_hex(key: int) -> str:
    """A key as it is recorded: 16 lower-case hex digits."""
    return f"{key:016x}"


def _is_token_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def _chat_text(messages: Sequence[Any]) -> str | None:
    """``role\\ncontent\\n`` per message; ``None`` when a message is not an object."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            return None
        content = message.get("content")
        if isinstance(content, list):
            text = "".join(
                p["text"]
                if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                else json.dumps(p, sort_keys=True, ensure_ascii=False)
                for p in content
            )
        elif content is None:
            text = ""
        else:
            text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        parts.append(f"{message.get('role', '')}\n{text}\n")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class PrefixKeys:
    """How much of a prompt the key covers.

    Attributes:
        prefix_blocks: full token blocks hashed (≥ 1).
        block_tokens: tokens per block (≥ 1; vLLM CPU: 128).
        prefix_chars: characters of a text or chat prompt hashed (≥ 1).

    Raises:
        ValueError: a value below 1.
    """

    prefix_blocks: int = DEFAULT_PREFIX_BLOCKS
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    prefix_chars: int = DEFAULT_PREFIX_CHARS

    def __post_init__(self) -> None:
        for name in ("prefix_blocks", "block_tokens", "prefix_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")

    @property
    def prefix_tokens(self) -> int:
        """Most tokens a token key covers: ``prefix_blocks × block_tokens``."""
        return self.prefix_blocks * self.block_tokens

    def of_tokens(self, token_ids: Sequence[int]) -> int:
        """The key of a token-ID prompt (module doc: its first full blocks).

        Raises:
            ValueError: a token ID outside [0, 2^32).
        """
        full = min(self.prefix_blocks, len(token_ids) // self.block_tokens)
        head = token_ids[: full * self.block_tokens] if full else token_ids
        try:
            data = struct.pack(f"<{len(head)}I", *head)
        except struct.error:
            raise ValueError(f"token IDs must be integers in [0, {_MAX_TOKEN_ID}]") from None
        return _digest(data, _TOKENS)

    def of_text(self, text: str) -> int:
        """The key of a text prompt: its first ``prefix_chars`` characters, UTF-8."""
        return _digest(text[: self.prefix_chars].encode("utf-8", "surrogatepass"), _TEXT)

    def of_json(self, raw: bytes) -> int | None:
        """The key of a raw request body (JSON bytes, as the gateway reads it), or ``None``
        when it is not a JSON object or carries no usable prompt (:meth:`of_body`)."""
        body: object = None
        with suppress(ValueError, RecursionError):
            body = json.loads(raw)
        return self.of_body(body) if isinstance(body, Mapping) else None

    def of_body(self, body: Mapping[str, Any]) -> int | None:
        """The key of an OpenAI completions or chat request body (parsed JSON), or ``None``
        when it carries no usable prompt (module doc)."""
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str):
            prompt = prompt[0]  # a batch: keyed by its first prompt
        if isinstance(prompt, str):
            return self.of_text(prompt)
        if _is_token_list(prompt) and prompt:
            try:
                return self.of_tokens(prompt)
            except ValueError:
                return None
        messages = body.get("messages")
        if isinstance(messages, list) and messages:
            text = _chat_text(messages)
            return None if text is None else self.of_text(text)
        return None
