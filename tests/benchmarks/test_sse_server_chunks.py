"""The benchmarks' raw-protocol fake vLLM sends the shared renderer's chunks byte for byte
(its templates are built from ``tests.support.vllm_chunks`` once, for speed)."""

from __future__ import annotations

import sse_server

from tests.support.vllm_chunks import DONE, completion_chunk, sse_event, usage_trailer


def test_token_chunks_are_the_renderers() -> None:
    # Token 2 of 3 without usage; token 3 of 3 (finish "length") with a running usage: a
    # 10-token prompt and 3 tokens so far make total_tokens 13.
    assert (
        sse_server.token_chunk(2, 3, 10, usage=False)
        == sse_event(
            completion_chunk("~", 10, 2, None, usage=False, completion_id="cmpl-bench")
        ).encode()
    )
    assert (
        sse_server.token_chunk(3, 3, 10, usage=True)
        == sse_event(completion_chunk("~", 10, 3, "length", completion_id="cmpl-bench")).encode()
    )


def test_trailer_is_the_renderers_then_done() -> None:
    # 10 prompt tokens, 3 completion tokens, total 13, no cached tokens.
    expected = sse_event(usage_trailer(10, 3, 0, completion_id="cmpl-bench")) + sse_event(DONE)
    assert expected.encode() == sse_server._TRAILER % (10, 13, 3)
