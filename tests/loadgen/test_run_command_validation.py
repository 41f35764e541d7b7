"""``loadgen run`` rejects impossible settings before any server starts or load is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main, workers_option


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args])
    return result.exit_code, result.output


def test_a_cache_smaller_than_one_full_sequence_is_rejected_up_front() -> None:
    # 8 MiB / 57,344 B = 146 tokens < 2048: vLLM would refuse to start after ~25 s.
    code, out = _run("kv-preemption", "--cases", "8MiB:1")
    assert code == 2
    assert "holds 146 tokens of the embedded model" in out
    assert "Use at least 112MiB" in out  # ceil(2048 × 57,344 B / 1 MiB) = 112 MiB


def test_a_too_small_control_is_rejected_before_the_first_case_runs() -> None:
    code, out = _run("prefix-eviction", "--control", "64MiB")
    assert code == 2
    assert "case control-64MiB" in out


def test_a_tiny_cache_with_an_attached_control_is_a_usage_error_not_a_crash() -> None:
    code, out = _run("prefix-eviction", "--cache", "1KiB", "--control-url", "http://127.0.0.1:9")
    assert code == 2
    assert "holds 0 tokens" in out


@pytest.mark.parametrize("flag", ["--settle-s", "--pollution-factor"])
def test_infinite_values_are_rejected(flag: str) -> None:
    code, out = _run("prefix-eviction", flag, "inf")
    assert code == 2
    assert "finite" in out


def test_out_pointing_at_a_file_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    code, out = _run("prefix-eviction", "--out", str(target))
    assert code == 2
    assert "is a file, not a directory" in out


@pytest.mark.parametrize(
    ("scenario", "flag"),
    [
        ("prefix-eviction", "--url"),
        ("prefix-eviction", "--control-url"),
        ("kv-preemption", "--url"),
        ("disconnect-abort", "--url"),
    ],
)
@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8000", "ftp://127.0.0.1", "http://:80"])
def test_a_bad_url_is_a_usage_error_before_any_run_directory(
    tmp_path: Path, scenario: str, flag: str, url: str
) -> None:
    out = tmp_path / "run"
    code, text = _run(scenario, flag, url, "--out", str(out))
    assert code == 2
    assert f"{flag}: '{url}' is not an http(s) URL with a host" in text
    assert not out.exists()


def test_a_bad_port_in_a_url_names_the_flag() -> None:
    code, out = _run("kv-preemption", "--url", "http://127.0.0.1:99999")
    assert code == 2
    assert "--url: 'http://127.0.0.1:99999' is not a valid URL (Port out of range" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--concurrency", "0"), "--concurrency: 0 is not a positive integer"),
        (("--concurrency", "8,x"), "--concurrency: x is not a positive integer"),
        (("--cache", "1GiB,2XB"), "--cache: invalid size '2XB': unknown unit 'XB'"),
        (("--cases", "1GiB:0"), "--cases: case '1GiB:0': 0 is not a positive integer"),
        (("--cases", "1GiB"), "--cases: case '1GiB': expected SIZE:CONCURRENCY"),
    ],
)
def test_kv_preemption_list_errors_name_what_the_user_typed(
    args: tuple[str, ...], message: str
) -> None:
    code, out = _run("kv-preemption", *args)
    assert code == 2
    assert message in out
    assert "1GiB:0" not in out or "--cases" in args  # no case the user never typed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--slo", "ttft<200ms"), "--slo: SLO item 'ttft<200ms': expected METRIC=LIMIT"),
        (("--rates", "2,x"), "--rates: rate 'x' is not a number"),
        (("--duration", "5s", "--warmup", "5s"), "--warmup must be shorter than --duration"),
        (("--arrival-pattern", "bursty"), "--arrival-pattern: Input should be 'gamma' or"),
    ],
)
def test_slo_goodput_flags_are_checked_before_anything_starts(
    args: tuple[str, ...], message: str
) -> None:
    code, out = _run("slo-goodput", *args)
    assert code == 2
    assert message in " ".join(out.split())


def test_workers_option_counts_auto_and_rejects_nonsense() -> None:
    import os

    assert workers_option(None) is None
    assert workers_option("3") == 3
    assert workers_option("auto") == len(os.sched_getaffinity(0))
    runner = CliRunner()
    result = runner.invoke(main, ["run", "prefix-eviction", "--workers", "0"])
    assert result.exit_code == 2 and "worker count" in result.output


def test_slo_goodput_refuses_several_workers_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "slo-goodput", "--workers", "2", "--out", str(out)])
    assert result.exit_code == 2
    assert "slo-goodput runs in one process only" in result.output
    assert not out.exists()


def test_breaker_refuses_several_workers_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "breaker", "--workers", "2", "--out", str(out)])
    assert result.exit_code == 2
    assert "breaker runs in one process only" in result.output
    assert not out.exists()


def test_spec_decode_cases_pass_the_up_front_checks_before_their_drafts_exist(
    tmp_path: Path,
) -> None:
    # The draft cases' command lines are checked before any draft is built; the run then
    # stops at the --out check, still before any server starts.
    target = tmp_path / "afile"
    target.write_text("x")
    code, out = _run("spec-decode", "--out", str(target))
    assert code == 2
    assert "is a file, not a directory" in out


def test_a_cache_too_small_for_the_draft_case_alone_is_rejected_up_front() -> None:
    # 118 MiB = 123,731,968 B: 2,157 tokens of 57,344 B (the baseline starts), but only
    # 2,013 of 57,344 + 2 × 2,048 = 61,440 B with a 2-layer draft, fewer than 2,048.
    code, out = _run("spec-decode", "--cache", "118MiB", "--requests", "1", "--concurrency", "1")
    assert code == 2
    assert "case draft-random: a 118MiB KV cache holds 2013 tokens" in out
    assert "(61,440 B each)" in out
