"""loadgen.token_timing: which chunk carried which tokens, with and without running usage."""

from __future__ import annotations

import pytest

from loadgen.chunks import CompletionChunk
from loadgen.token_timing import TokenStamps, TokenTally, spread

MS = 1_000_000


def token(running: int | None, text: bool = True) -> CompletionChunk:
    """A chunk with one choice; ``running`` is its usage count (None: no usage block)."""
    return CompletionChunk(running, 8, None, True, text, None, None)


def trailer(total: int) -> CompletionChunk:
    return CompletionChunk(total, 8, 0, False, False, None, None)


def tally(*chunks: tuple[int, CompletionChunk]) -> TokenStamps:
    t = TokenTally()
    for now, chunk in chunks:
        t.add(chunk, now)
    return t.result()


def test_running_usage_gives_each_chunk_its_growth() -> None:
    # Spec decoding: the count goes 1 → 5 in a chunk 60 ms after the first, so that chunk
    # carries 4 tokens (the analysis divides its gap into four 15 ms ITL values).
    got = tally((100 * MS, token(1)), (160 * MS, token(5)), (170 * MS, trailer(5)))
    assert got == TokenStamps([100 * MS, 160 * MS], [1, 4], "usage")


def test_chunks_in_one_read_share_one_stamp() -> None:
    # Two chunks read together at 20 ms: one entry of 2 tokens, not a 0 ms gap.
    got = tally((10 * MS, token(1)), (20 * MS, token(2)), (20 * MS, token(3)))
    assert got == TokenStamps([10 * MS, 20 * MS], [1, 2], "usage")


def test_a_chunk_without_new_tokens_gets_no_stamp() -> None:
    got = tally((10 * MS, token(1)), (15 * MS, token(1, text=False)), (20 * MS, token(2)))
    assert got == TokenStamps([10 * MS, 20 * MS], [1, 1], "usage")


def test_usage_only_in_the_trailer_stamps_the_text_chunks() -> None:
    # No running usage: the three text chunks are the tokens, the trailer (N = 3) confirms.
    # Without this, all 3 tokens fell on the trailer at 90 ms and TTFT became E2EL.
    got = tally(
        (50 * MS, token(None)),
        (60 * MS, token(None)),
        (70 * MS, token(None)),
        (90 * MS, trailer(3)),
    )
    assert got == TokenStamps([50 * MS, 60 * MS, 70 * MS], [1, 1, 1], "text")


def test_without_usage_an_empty_text_chunk_is_a_token_when_the_count_says_so() -> None:
    # 3 choice chunks, the first with empty text (half a UTF-8 character), N = 3: all three
    # carried a token, so TTFT is the first chunk's arrival (50 ms), not the first text's.
    got = tally(
        (50 * MS, token(None, text=False)),
        (60 * MS, token(None)),
        (70 * MS, token(None)),
        (90 * MS, trailer(3)),
    )
    assert got == TokenStamps([50 * MS, 60 * MS, 70 * MS], [1, 1, 1], "text")


def test_without_usage_a_tokenless_empty_chunk_is_dropped_when_the_count_says_so() -> None:
    # 4 choice chunks, 3 with text, N = 3: the empty one carried nothing.
    got = tally(
        (50 * MS, token(None)),
        (55 * MS, token(None, text=False)),
        (60 * MS, token(None)),
        (70 * MS, token(None)),
        (90 * MS, trailer(3)),
    )
    assert got == TokenStamps([50 * MS, 60 * MS, 70 * MS], [1, 1, 1], "text")


def test_without_usage_an_unmatched_count_is_spread_over_the_text_chunks() -> None:
    # Speculative decoding without running usage: 4 text chunks, N = 8. The first keeps 1
    # token, 7 go over the other 3 as 2, 2, 3; first and last stamps stay exact.
    got = tally(
        (50 * MS, token(None)),
        (60 * MS, token(None)),
        (70 * MS, token(None)),
        (80 * MS, token(None)),
        (90 * MS, trailer(8)),
    )
    assert got == TokenStamps([50 * MS, 60 * MS, 70 * MS, 80 * MS], [1, 2, 2, 3], "text")
    assert sum(got.chunk_tokens) == 8


def test_all_tokens_in_one_chunk_is_final_only() -> None:
    # A buffering proxy: 5 tokens' chunks all in one read at 300 ms.
    buffered = tally(*((300 * MS, token(k)) for k in range(1, 6)), (300 * MS, trailer(5)))
    assert buffered == TokenStamps([300 * MS], [5], "final_only")
    # A server that only reports the final usage and sends no choice at all.
    assert tally((300 * MS, trailer(5))) == TokenStamps([300 * MS], [5], "final_only")


def test_one_token_in_one_chunk_is_not_final_only() -> None:
    assert tally((40 * MS, token(1)), (41 * MS, trailer(1))).token_timing == "usage"


def test_no_token_gives_no_timing() -> None:
    assert tally() == TokenStamps([], [], None)
    assert tally((40 * MS, trailer(0))) == TokenStamps([], [], None)


def test_a_cut_stream_without_usage_counts_its_text_chunks() -> None:
    # Disconnected before the trailer: no count to reconcile with, one token per text chunk.
    t = TokenTally()
    t.add(token(None), 10 * MS)
    t.add(token(None, text=False), 20 * MS)
    t.add(token(None), 30 * MS)
    assert t.received_tokens == 2
    assert t.result() == TokenStamps([10 * MS, 30 * MS], [1, 1], "text")


@pytest.mark.parametrize(
    ("total", "events", "expected"),
    [
        (8, 4, [1, 2, 2, 3]),  # 1 first, then 7 over 3: 2, 2, 3
        (4, 4, [1, 1, 1, 1]),
        (5, 1, [5]),
        (2, 5, [1, 0, 0, 0, 1]),  # fewer tokens than chunks: first and last
        (1, 3, [1, 0, 0]),
        (0, 2, [0, 0]),
    ],
)
def test_spread(total: int, events: int, expected: list[int]) -> None:
    assert spread(total, events) == expected
    assert sum(spread(total, events)) == total
