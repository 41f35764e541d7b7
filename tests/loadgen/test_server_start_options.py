"""``loadgen server start``: its flags come from a model, with the scenarios' names for the
knobs they share, and reach the server configuration; bad values fail before any start."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

import loadgen.cli.server_start as server_start
from loadgen.cli import main
from scenarios.common import ServerParams
from scenarios.registry import SCENARIOS
from server.config import ServerConfig


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[ServerConfig, float]]:
    """What the command would start: the start itself is replaced by a refusal (exit 1)."""
    seen: list[tuple[ServerConfig, float]] = []

    def fake_start(config: ServerConfig, timeout_s: float) -> Any:
        seen.append((config, timeout_s))
        raise click.ClickException("not started (test)")

    monkeypatch.setattr(server_start, "_start_server", fake_start)
    return seen


def _start(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["server", "start", *args])
    return result.exit_code, result.output


def test_every_flag_reaches_the_server_configuration(
    started: list[tuple[ServerConfig, float]],
) -> None:
    code, out = _start(
        "--cache", "2GiB", "--max-model-len", "1024", "--max-num-seqs", "4",
        "--no-prefix-caching", "--no-enforce-eager", "--vllm-args", "--seed 7 --block-size 16",
        "--speculative-config", '{"method": "ngram"}', "--engine-core-nice", "5",
        "--server-group-nice", "3", "--model-variant", "fp32", "--start-timeout-s", "12.5",
    )  # fmt: skip
    assert code == 1 and "not started (test)" in out, out
    ((config, timeout_s),) = started
    assert config.kv_cache_bytes == 2 * 2**30
    assert (config.max_model_len, config.max_num_seqs) == (1024, 4)
    assert config.enable_prefix_caching is False
    assert config.enforce_eager is False
    assert config.extra_args == ("--seed", "7", "--block-size", "16")  # shell words, in order
    assert config.speculative_config == {"method": "ngram"}
    assert (config.engine_core_nice, config.server_group_nice) == (5, 3)
    assert config.model_variant == "fp32"
    assert timeout_s == 12.5


def test_compile_is_a_hidden_deprecated_name_of_no_enforce_eager(
    started: list[tuple[ServerConfig, float]],
) -> None:
    code, out = _start("--compile")
    assert code == 1
    assert "warning: --compile is deprecated; use --no-enforce-eager" in out
    assert started[0][0].enforce_eager is False
    help_text = CliRunner().invoke(main, ["server", "start", "--help"]).output
    assert "--compile" not in help_text
    assert "--extra-arg" not in help_text  # one name for vLLM's extra arguments: --vllm-args


def test_server_knobs_have_one_name_on_server_start_and_every_scenario() -> None:
    start_flags = {o.name: o.opts for o in server_start.start_command().params}
    for name in ServerParams.model_fields:
        for scenario in SCENARIOS.values():
            run = main.get_command(click.Context(main), "run")
            assert isinstance(run, click.Group)
            command = run.get_command(click.Context(run), scenario.name)
            assert command is not None
            run_flags = {o.name: o.opts for o in command.params}
            assert run_flags[name] == start_flags[name], (scenario.name, name)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cache", "1gb"), "--cache: invalid size '1gb': unknown unit 'gb'"),
        (("--engine-core-nice", "20"), "--engine-core-nice: Input should be less than or equal "
         "to 19 (got 20)"),
        (("--max-num-seqs", "0"), "--max-num-seqs: Input should be greater than 0 (got 0)"),
        (("--start-timeout-s", "nan"), "Invalid value for '--start-timeout-s': 'nan' is not a "
         "finite number"),
        (("--start-timeout-s", "1e999"), "'1e999' is not a finite number"),
        (("--start-timeout-s", "86401"), "--start-timeout-s: Input should be less than or equal "
         "to 86400 (got 86401.0)"),
        (("--vllm-args", "--seed '7"), "--vllm-args: not shell words: No closing quotation"),
        (("--speculative-config", "[1]"), "--speculative-config': must be a JSON object"),
    ],
)  # fmt: skip
def test_bad_values_fail_in_one_line_before_any_start(
    started: list[tuple[ServerConfig, float]], args: tuple[str, ...], message: str
) -> None:
    code, out = _start(*args)
    assert code == 2, out
    assert message in " ".join(out.split())
    assert started == []
