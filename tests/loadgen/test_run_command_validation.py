"""``loadgen run`` rejects impossible settings before any server starts or load is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.cli.run import workers_option


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
        (("--concurrency", "0"), "--concurrency: concurrency 0 must be ≥ 1"),
        (("--concurrency", "8,x"), "--concurrency: concurrency 'x' is not an integer"),
        (("--cache", "1GiB,2XB"), "--cache: invalid size '2XB': unknown unit 'XB'"),
        (("--cases", "1GiB:0"), "--cases: case '1GiB:0': concurrency 0 must be ≥ 1"),
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
        (
            ("--arrival-pattern", "bursty"),
            "Invalid value for '--arrival-pattern': 'bursty' is not one of 'gamma', 'constant'",
        ),
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


# -- flags that used to be accepted and then hung, flooded or ran a meaningless plan --------


@pytest.mark.parametrize(
    ("scenario", "args", "message"),
    [
        # Floor 0.05 s: vLLM renders /metrics on the cores it serves with.
        ("prefix-eviction", ("--scrape-interval-s", "0.001"),
         "--scrape-interval-s: Input should be greater than or equal to 0.05"),
        ("prefix-eviction", ("--scrape-interval-s", "3600"),
         "--scrape-interval-s: Input should be less than or equal to 60"),
        # Floor 64 KiB = 65,536 bytes: a vLLM page is ~50 KB.
        ("prefix-eviction", ("--metrics-max-bytes", "1000"),
         "--metrics-max-bytes: Input should be greater than or equal to 65536"),
        # A password in a bad URL is not repeated in the error.
        ("prefix-eviction", ("--url", "http://u:s3cret@127.0.0.1:8000/v1"),
         "--url: 'http://u:***@127.0.0.1:8000/v1': drop /v1 ('http://u:***@127.0.0.1:8000')"),
        ("prefix-eviction", ("--settle-s", "1e11"),
         "--settle-s: Input should be less than or equal to 3600"),
        ("prefix-eviction", ("--anchors", "4", "--requests", "2"),
         "--anchors (4) must not exceed --requests (2): request i of a phase probes anchor "
         "prefix i mod 4, so anchor prefixes 2 to 3 would never be probed"),
        ("prefix-eviction", ("--url", "http://127.0.0.1:8000", "--control-url",
                             "http://127.0.0.1:8000/"),
         "--control-url must name another server than --url"),
        ("prefix-eviction", ("--url", "http://127.0.0.1:8000/v1"),
         "--url: 'http://127.0.0.1:8000/v1': drop /v1 ('http://127.0.0.1:8000')"),
        ("prefix-eviction", ("--concurrency", "100000"),
         "--concurrency: Input should be less than or equal to 1024"),
        ("prefix-eviction", ("--pollution-factor", "1e9"),
         "--pollution-factor: Input should be less than or equal to 100"),
        ("prefix-eviction", ("--stall-timeout-s", "0"),
         "--stall-timeout-s: Input should be greater than 0"),
        ("prefix-eviction", ("--stall-timeout-s", "700", "--request-timeout-s", "600"),
         "--stall-timeout-s (700) must not exceed --request-timeout-s (600)"),
        ("disconnect-abort", ("--requests", "5000"),
         "--requests: Input should be less than or equal to 1024"),
        ("disconnect-abort", ("--idle-timeout-s", "1e9"),
         "--idle-timeout-s: Input should be less than or equal to 3600"),
        ("kv-preemption", ("--concurrency", "8,2000"),
         "--concurrency: concurrency 2000 must be ≤ 1024 (requests at once: each holds a "
         "socket of the client)"),
        ("breaker", ("--duration-s", "1e9"),
         "--duration-s: Input should be less than or equal to 86400"),
        ("slo-goodput", ("--rates", "2,5000"),
         "--rates: rate 5000 must be ≤ 1000 req/s (above it the client's send loop, not the "
         "rate, decides when requests leave)"),
        ("slo-goodput", ("--duration", "100000m"),
         "--duration: '100000m' is longer than 86400 s (one day)"),
        # 900 req/s × 200 s = 180,000 requests in one phase > 100,000.
        ("slo-goodput", ("--rates", "900", "--duration", "200s"),
         "rate 900 req/s over --duration 200 s is 180000 requests, more than 100000 in a phase"),
        ("slo-goodput", ("--max-concurrency", "5000"),
         "--max-concurrency: Input should be less than or equal to 1024"),
        ("spec-decode", ("--concurrency", "1,4096"),
         "--concurrency: concurrency 4096 must be ≤ 1024"),
        ("spec-decode", ("--url", "http://127.0.0.1:8000", "--baseline-url",
                         "http://127.0.0.1:8000"),
         "--baseline-url must name another server than --url"),
        # 1000 req/s × 200 s = 200,000 requests > 100,000.
        ("breaker", ("--rate-rps", "1000", "--duration-s", "200"),
         "--rate-rps × --duration-s is 200000 requests, more than 100000 in one episode"),
    ],
)  # fmt: skip
def test_unbounded_or_meaningless_flags_are_refused_before_any_load(
    tmp_path: Path, scenario: str, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "run"
    code, text = _run(scenario, *args, "--out", str(out))
    assert code == 2, text
    assert message in " ".join(text.split()), text
    assert not out.exists()


def test_help_states_the_timeout_defaults() -> None:
    result = CliRunner().invoke(main, ["run", "prefix-eviction", "--help"])
    text = " ".join(result.output.split())
    # With each field's range (server.cli_options): both at most MAX_RUN_S, one day.
    assert "--stall-timeout-s" in text and "[default: 300.0; 0 < x ≤ 86400]" in text
    assert "--request-timeout-s" in text and "[default: 3600.0; 0 < x ≤ 86400]" in text
