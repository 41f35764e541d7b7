"""server.logs: the one log tail that start-up failures quote (vLLM, nginx, vllm-router, the
gateway)."""

from __future__ import annotations

from pathlib import Path

from server.logs import last_lines, log_tail, read_log


def test_empty_or_missing_logs_are_named_not_left_as_a_dangling_colon(tmp_path: Path) -> None:
    a, b = tmp_path / "error.log", tmp_path / "out.log"
    a.write_text("\n\n")
    assert log_tail([a, b]) == f"(nothing in {a}, {b})"
    assert log_tail(b) == f"(nothing in {b})"
    assert read_log(b) == "" and last_lines(b, 3) == []


def test_each_log_with_lines_is_quoted_under_its_path(tmp_path: Path) -> None:
    a, b = tmp_path / "error.log", tmp_path / "out.log"
    a.write_text("one\n\ntwo\nthree\n")  # blank lines are not counted or quoted
    b.write_text("x" * 3000)
    assert log_tail([a, b], lines=2, max_chars=10) == f"{a}:\ntwo\nthree\n{b}:\n" + "x" * 10
    assert log_tail(a, lines=1) == f"{a}:\nthree"


def test_a_quoted_log_carries_no_terminal_colours(tmp_path: Path) -> None:
    log = tmp_path / "vllm-router.log"
    log.write_text("\x1b[2m2026-12-02\x1b[0m \x1b[31mERROR\x1b[0m worker unhealthy\n")
    assert log_tail([log]) == f"{log}:\n2026-12-02 ERROR worker unhealthy"
    assert last_lines(log, 1) == ["2026-12-02 ERROR worker unhealthy"]
