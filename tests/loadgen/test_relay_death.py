"""A case whose gateway or proxy ended before the case did is failed, naming it: requests
through a dead relay fail because of the relay, not the server."""

from __future__ import annotations

import pytest

from loadgen.case.ending import check_relays_ran_through


def test_a_relay_still_running_fails_nothing() -> None:
    check_relays_ran_through([("nginx", lambda: None), ("the gateway", lambda: None)])


@pytest.mark.parametrize(
    ("code", "how"), [(-9, "signal 9"), (-15, "signal 15"), (0, "exit code 0"), (1, "exit code 1")]
)
def test_a_relay_that_ended_fails_the_case_with_how_it_ended(code: int, how: str) -> None:
    with pytest.raises(RuntimeError) as caught:
        check_relays_ran_through([("the gateway", lambda: None), ("nginx", lambda: code)])
    assert str(caught.value).startswith(f"nginx ended during the case ({how}): requests through")
