"""An open loop's linear ramp-up (``OpenLoop.ramp_s``), pinned by hand."""

from __future__ import annotations

import pytest

from scenarios.arrivals import OpenLoop, arrivals_within, open_loop_offsets_ns


def test_constant_rate_ramped_by_hand() -> None:
    """2 req/s constant: steady offsets u = 0, 0.5, …, 2.5 s. Ramp T = 4 s: u < T/2 = 2 maps
    to √(2·T·u) = √(8u): 0, 2, 2.828, 3.464 s; u ≥ 2 to u + 2: 4, 4.5 s (full rate after
    the ramp: gaps of 0.5 s again). Expected arrivals by 4 s: λ·T/2 = 4, the first four."""
    arrival = OpenLoop(rate_rps=2, pattern="constant", ramp_s=4)
    got = [x / 1e9 for x in open_loop_offsets_ns(arrival, 6)]
    assert got == pytest.approx([0, 2, 8**0.5 * 1, 12**0.5, 4, 4.5], abs=1e-6)
    assert arrivals_within(arrival, 4.0) == 4


def test_no_ramp_keeps_the_schedule() -> None:
    plain = OpenLoop(rate_rps=3, burstiness=0.5, seed=7)
    assert open_loop_offsets_ns(plain, 50) == open_loop_offsets_ns(
        plain.model_copy(update={"ramp_s": 0.0}), 50
    )
