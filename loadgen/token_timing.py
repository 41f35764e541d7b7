"""Which chunk of a stream carried which generated tokens, and how sure we are (pure).

TTFT, TPOT and ITL need the arrival of every token-carrying chunk and its token count
(``analysis.latency``). Three situations, named in the record's ``token_timing``:

- ``usage``: the server reports a running usage on every chunk with a choice
  (``continuous_usage_stats``); a chunk's tokens are the growth of that count. Exact.
- ``text``: the server reports usage only at the end. Each chunk with a choice is then a
  candidate; the final usage count N decides how to read them (see :meth:`TokenTally.result`).
  TTFT (first stamp), E2EL (last stamp) and the token total are exact whenever N matches the
  chunks; per-chunk counts are exact in the common cases and an even spread otherwise.
- ``final_only``: 2+ tokens and all of them arrived in one chunk (a proxy that buffers the
  whole response, or a server whose only token count is the final usage): TTFT is then
  really E2EL and must not be read as a time to first token.

Stamps are per network read: chunks that arrive in the same read share one stamp and are
merged into one entry (their tokens summed), since they reached the client together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadgen.chunks import CompletionChunk

TokenTiming = Literal["usage", "text", "final_only"]


@dataclass(frozen=True)
class TokenStamps:
    """The token-carrying chunks of one response.

    Attributes:
        chunk_ns: arrival (monotonic ns) of each chunk that carried ≥ 1 generated token.
        chunk_tokens: tokens in each of those chunks; sums to the tokens received.
        token_timing: how the counts were obtained (module docstring); ``None`` when no
            token arrived.
    """

    chunk_ns: list[int]
    chunk_tokens: list[int]
    token_timing: TokenTiming | None


def _merged(stamps: list[int], counts: list[int]) -> tuple[list[int], list[int]]:
    """Entries with equal consecutive stamps (one network read) merged; zero counts dropped."""
    out_ns: list[int] = []
    out_tokens: list[int] = []
    for ns, k in zip(stamps, counts, strict=True):
        if k <= 0:
            continue
        if out_ns and out_ns[-1] == ns:
            out_tokens[-1] += k
        else:
            out_ns.append(ns)
            out_tokens.append(k)
    return out_ns, out_tokens


def spread(total: int, events: int) -> list[int]:
    """``total`` tokens over ``events`` chunks when the stream does not say which had how many.

    The first chunk gets 1 (vLLM's prefill step emits exactly one token, also under
    speculative decoding); the rest is spread evenly over the later chunks, the remainder on
    the last ones (7 over 3 → 2, 2, 3). With fewer tokens than chunks, the first chunk and
    the last ``total − 1`` get one each, so first- and last-token arrivals stay exact.
    A single chunk gets everything.
    """
    if events <= 0 or total <= 0:
        return [0] * max(events, 0)
    if events == 1:
        return [total]
    if total < events:
        return [1] + [0] * (events - total) + [1] * (total - 1)
    rest, later = total - 1, events - 1
    base, extra = divmod(rest, later)
    return [1] + [base] * (later - extra) + [base + 1] * extra


class TokenTally:
    """Accumulates one stream's chunks (:meth:`add`) into :class:`TokenStamps` (:meth:`result`).

    The mode is fixed by the first chunk with a choice: with a usage it is ``usage``, without
    one ``text``. Memory per request: in ``usage`` mode one stamp per token-carrying read; in
    ``text`` mode one stamp per chunk with a choice until the end.
    """

    def __init__(self) -> None:
        self.running_usage: bool | None = None  # None until the first chunk with a choice
        self.running_tokens = 0
        self.final_tokens: int | None = None
        self._usage_ns: list[int] = []
        self._usage_tokens: list[int] = []
        self._choice_ns: list[int] = []
        self._text: list[bool] = []
        self._last_usage_ns: int | None = None

    def add(self, chunk: CompletionChunk, now_ns: int) -> None:
        """Account for one chunk that arrived (in a read) at ``now_ns``."""
        completion = chunk.completion_tokens
        if completion is not None:
            self.final_tokens = completion
            self._last_usage_ns = now_ns
        if not chunk.has_choice:
            return  # a usage-only chunk (the trailer) carries no token of its own
        if self.running_usage is None:
            self.running_usage = completion is not None
        if self.running_usage:
            new = (completion or 0) - self.running_tokens
            if new > 0:
                self.running_tokens += new
                if self._usage_ns and self._usage_ns[-1] == now_ns:
                    self._usage_tokens[-1] += new  # same read: one entry (see _merged)
                else:
                    self._usage_ns.append(now_ns)
                    self._usage_tokens.append(new)
        else:
            self._choice_ns.append(now_ns)
            self._text.append(chunk.has_text)

    @property
    def received_tokens(self) -> int:
        """Tokens received so far: the running usage, or (``text`` mode) the text chunks."""
        if self.running_usage:
            return self.running_tokens
        return sum(self._text)

    def result(self) -> TokenStamps:
        """The stamps and counts, reconciled with the final usage in ``text`` mode.

        ``text`` mode, with N the final usage count (``None``: never reported):

        - N is ``None``: each chunk with text is one token (a disconnected or broken stream).
        - N equals the chunks with a choice: each of them carried one token (vLLM without
          continuous usage; empty-text chunks are tokens that decode to nothing). Exact.
        - N equals the chunks with text: the empty ones carried no token. Exact.
        - otherwise: N spread over the text chunks (:func:`spread`), or over the choice
          chunks if none had text: first and last stamps exact, per-chunk counts estimated.
        - no chunk with a choice at all: all N tokens at the chunk that reported them.
        """
        if self.running_usage:
            stamps, counts = _merged(self._usage_ns, self._usage_tokens)
            return self._stamped(stamps, counts, "usage")
        n = self.final_tokens
        text_ns = [ns for ns, t in zip(self._choice_ns, self._text, strict=True) if t]
        if n is None:
            stamps, counts = _merged(text_ns, [1] * len(text_ns))
        elif n == len(self._choice_ns) and n > 0:
            stamps, counts = _merged(self._choice_ns, [1] * n)
        elif text_ns:
            stamps, counts = _merged(text_ns, spread(n, len(text_ns)))
        elif self._choice_ns:
            stamps, counts = _merged(self._choice_ns, spread(n, len(self._choice_ns)))
        elif n > 0 and self._last_usage_ns is not None:
            stamps, counts = [self._last_usage_ns], [n]
        else:
            stamps, counts = [], []
        return self._stamped(stamps, counts, "text")

    @staticmethod
    def _stamped(stamps: list[int], counts: list[int], mode: TokenTiming) -> TokenStamps:
        if not stamps:
            return TokenStamps([], [], None)
        if len(stamps) == 1 and counts[0] >= 2:
            mode = "final_only"
        return TokenStamps(stamps, counts, mode)
