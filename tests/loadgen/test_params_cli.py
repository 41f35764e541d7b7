"""loadgen.params_cli: scenario Params ↔ click options, validation errors as usage errors."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from loadgen.params_cli import options_for, params_from_options
from scenarios.prefix_eviction import PrefixEvictionParams


def command(seen: list[dict[str, Any]]) -> click.Command:
    def callback(**values: Any) -> None:
        seen.append(values)
        params = params_from_options(PrefixEvictionParams, values)
        click.echo(params.model_dump_json())

    return click.Command("run", callback=callback, params=options_for(PrefixEvictionParams))


def by_name(name: str) -> click.Option:
    opts = {o.name: o for o in options_for(PrefixEvictionParams)}
    return opts[name]


def test_every_field_becomes_a_dashed_option() -> None:
    names = {o.name for o in options_for(PrefixEvictionParams)}
    assert names == set(PrefixEvictionParams.model_fields)
    assert by_name("cache").opts == ["--cache"]
    assert by_name("pollution_factor").opts == ["--pollution-factor"]
    assert by_name("scrape_interval_s").opts == ["--scrape-interval-s"]


def test_option_types_follow_the_field_types() -> None:
    assert by_name("concurrency").type is click.INT
    assert by_name("pollution_factor").type is click.FLOAT
    assert by_name("cache").type is click.STRING
    assert by_name("url").type is click.STRING  # str | None → str


def test_booleans_become_flag_pairs_with_the_model_default() -> None:
    opt = by_name("enforce_eager")
    assert opt.opts == ["--enforce-eager"]
    assert opt.secondary_opts == ["--no-enforce-eager"]
    assert opt.default is True


def test_help_shows_the_field_description_and_default() -> None:
    assert (
        by_name("cache").help
        == "KV cache size of the tested case (bytes: 1GiB = 2^30). [default: 1GiB]"
    )


def test_given_options_are_validated_and_unset_ones_keep_defaults() -> None:
    seen: list[dict[str, Any]] = []
    result = CliRunner().invoke(
        command(seen), ["--cache", "2GiB", "--concurrency", "8", "--no-enforce-eager"]
    )
    assert result.exit_code == 0, result.output
    params = params_from_options(PrefixEvictionParams, seen[0])
    assert params == PrefixEvictionParams(cache="2GiB", concurrency=8, enforce_eager=False)
    assert params.requests == 48  # unset → model default


def test_bad_cache_is_a_usage_error_naming_the_flag() -> None:
    with pytest.raises(click.UsageError) as info:
        params_from_options(PrefixEvictionParams, {"cache": "1gb"})
    assert info.value.message.startswith("--cache: ")
    assert "unknown unit 'gb'" in info.value.message


def test_bad_cache_on_the_command_line_exits_with_usage_status() -> None:
    result = CliRunner().invoke(command([]), ["--cache", "1 Gib"])
    assert result.exit_code == 2
    assert "--cache: " in result.output


def test_cross_field_errors_are_usage_errors_too() -> None:
    # prefix 2000 + suffix 32 + output 16 = 2048 = max_model_len: fits;
    # prefix 2001 → 2001 + 32 + 16 = 2049 > 2048.
    params_from_options(PrefixEvictionParams, {"prefix_tokens": 2000})
    # Cross-field messages name the flags the user typed, not the Python field names.
    with pytest.raises(
        click.UsageError,
        match=r"^prompt \(2033\) \+ output \(16\) tokens exceed --max-model-len 2048$",
    ):
        params_from_options(PrefixEvictionParams, {"prefix_tokens": 2001})


def test_several_bad_values_are_all_reported() -> None:
    with pytest.raises(click.UsageError) as info:
        params_from_options(PrefixEvictionParams, {"cache": "0GiB", "concurrency": 0})
    assert "--cache: " in info.value.message
    assert "--concurrency: " in info.value.message
