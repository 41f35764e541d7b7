"""A failed vLLM start is explained by its root cause, not by the wrapper errors after it."""

from __future__ import annotations

from pathlib import Path

from server.manager import likely_cause

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_root_cause_of_a_too_small_kv_cache_is_the_engine_value_error() -> None:
    log = (FIXTURES / "vllm_0.32.0_cpu_start_failure_kv_too_small.log").read_text()
    cause = likely_cause(log)
    assert cause.startswith(
        "ValueError: To serve at least one request with the model's max seq len (2048)"
    )
    assert "larger than the available KV cache memory (0.01 GiB)" in cause


def test_warning_lines_quoting_an_exception_are_not_the_cause() -> None:
    log = (
        "(APIServer pid=1) WARNING 11-30 14:09:59 [system_utils.py:255] Found ulimit ... "
        "`OSError: [Errno 24] Too many open files`\n"
        "(EngineCore pid=2) ERROR 11-30 14:10:14 [core.py:1510] RuntimeError: boom\n"
    )
    assert likely_cause(log) == "RuntimeError: boom"


def test_argument_errors_are_found() -> None:
    log = "usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: --bogus\n"
    assert likely_cause(log) == "api_server.py: error: unrecognized arguments: --bogus"


def test_a_log_without_errors_says_so() -> None:
    assert likely_cause("INFO all good\n") == "no error line found in the log"
