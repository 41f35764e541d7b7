"""server.cli_options: pydantic models ↔ click options, validation errors as usage errors."""

from __future__ import annotations

from typing import Any, Literal

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field, model_validator

from scenarios.prefix_eviction import PrefixEvictionParams
from server.cli_options import FINITE_FLOAT, Deprecated, ModelOptions

OPTIONS = ModelOptions(PrefixEvictionParams)


def options_for(model: type[PrefixEvictionParams]) -> list[click.Option]:
    return ModelOptions(model).options()


def params_from_options(model: type[PrefixEvictionParams], values: dict[str, Any]) -> Any:
    return ModelOptions(model).build(values)


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
    assert by_name("pollution_factor").type is FINITE_FLOAT
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


# --- The generator on its own (a small model of each kind of field) -------------------------


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    wait_s: float = Field(default=1.0, gt=0, description="Wait (s).")


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="A name.")
    count: int = Field(default=2, ge=1, le=10)
    mode: Literal["a", "b"] = "a"
    items: tuple[str, ...] = ()
    eager: bool = True
    spec: dict[str, object] | None = None
    inner: Inner = Inner()

    @model_validator(mode="after")
    def _rule(self) -> Outer:
        if self.count > 5 and self.mode == "b":
            raise ValueError("count above 5 needs mode a")
        return self


def _invoke(options: ModelOptions[Outer], *args: str) -> tuple[int, str, list[Outer]]:
    built: list[Outer] = []

    def callback(**values: Any) -> None:
        built.append(options.build(values))

    result = CliRunner().invoke(click.Command("c", callback=callback, params=options.options()),
                                list(args))  # fmt: skip
    return result.exit_code, " ".join(result.output.split()), built


def test_each_kind_of_field_becomes_its_kind_of_option() -> None:
    options = ModelOptions(
        Outer, flatten=True, flag=lambda p: p.replace(".", "-").replace("_", "-")
    )
    code, out, built = _invoke(options, "--name", "x", "--count", "3", "--mode", "b",
                               "--items", "p", "--items", "q", "--no-eager",
                               "--spec", '{"k": 1}', "--inner-wait-s", "0.5")  # fmt: skip
    assert code == 0, out
    assert built == [Outer(name="x", count=3, mode="b", items=("p", "q"), eager=False,
                           spec={"k": 1}, inner=Inner(wait_s=0.5))]  # fmt: skip


def test_without_flatten_a_nested_model_has_no_flag() -> None:
    assert {o.name for o in ModelOptions(Outer).options()} == {
        "name", "count", "mode", "items", "eager", "spec"}  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "NaN"])
def test_a_float_flag_refuses_every_non_finite_value(value: str) -> None:
    code, out, built = _invoke(ModelOptions(Outer, flatten=True), "--name", "x",
                               "--wait-s", value)  # fmt: skip
    assert code == 2
    assert f"Invalid value for '--wait-s': '{value}' is not a finite number" in out
    assert built == []


def test_errors_are_one_line_naming_the_flags_with_the_value_given() -> None:
    code, out, _ = _invoke(ModelOptions(Outer), "--name", "x", "--count", "11")
    assert code == 2
    assert "Error: --count: Input should be less than or equal to 10 (got 11)" in out
    # A rule across fields names the flags in its message.
    code, out, _ = _invoke(ModelOptions(Outer), "--name", "x", "--count", "6", "--mode", "b")
    assert "Error: --count above 5 needs --mode a" in out
    # A required field not given names its flag.
    code, out, _ = _invoke(ModelOptions(Outer), "--count", "3")
    assert "Error: --name: Field required" in out


def test_given_only_leaves_unset_fields_to_the_base_and_names_base_values_by_path() -> None:
    options = ModelOptions(Outer, flatten=True, given_only=True)
    built = options.build({"count": None, "eager": None, "inner__wait_s": 2.0},
                          base={"name": "file", "count": 4, "eager": False})  # fmt: skip
    assert (built.name, built.count, built.eager, built.inner.wait_s) == ("file", 4, False, 2.0)
    with pytest.raises(click.UsageError) as info:
        options.build({"inner__wait_s": None}, base={"name": "f", "inner": {"wait_s": -1}})
    assert info.value.message == "inner.wait_s: Input should be greater than 0 (got -1)"


def test_a_deprecated_flag_sets_its_field_and_says_what_to_use() -> None:
    options = ModelOptions(Outer, deprecated=[Deprecated("--lazy", "eager", False)])
    hidden = [o for o in options.options() if o.hidden]
    assert [o.opts for o in hidden] == [["--lazy"]]
    code, out, built = _invoke(options, "--name", "x", "--lazy")
    assert code == 0
    assert "warning: --lazy is deprecated; use --no-eager" in out
    assert built[0].eager is False
