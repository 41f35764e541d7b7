"""Command-line options from pydantic models, and back: the project's one flag generator.

Every field of a model becomes one option, typed from its annotation: ``int`` an integer,
``float`` a *finite* number (``nan``, ``inf`` and ``1e999`` are refused by the option itself,
whatever the model allows), ``bool`` a ``--flag/--no-flag`` pair, a ``Literal`` a choice, a
tuple or list a repeatable option, a ``dict`` a JSON object, a ``Path`` a path, anything else
text. Bounds, units and rules across fields stay in the model: :meth:`ModelOptions.build`
validates what was given and turns a validation error into ONE usage line that names the
flags the user typed (exit 2 before anything starts). Nested models may be flattened into
flags of their own (the gateway's ``--idle-timeout`` is ``timeouts.idle_s``).

``loadgen server start``, ``loadgen run``/``gate`` (a scenario's parameters) and
``loadgen gateway`` all get their flags here, so a knob has one name everywhere its model
field is shared. This module imports nothing else of the project: every package, the gateway
included, may use it (tests/test_package_layering.py).
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import click
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from server.net.errors import describe_exception
from server.net.json_text import loads_strict

M = TypeVar("M", bound=BaseModel)


class FiniteFloat(click.ParamType):
    """A float option that refuses ``nan``, ``inf`` and values that overflow to it
    (``1e999``): no knob of this project means anything at a non-finite value. With bounds
    (for options no model holds), also a value outside ``[lo, hi]`` (open ends excluded)."""

    name = "FLOAT"

    def __init__(
        self,
        lo: float | None = None,
        hi: float | None = None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        lo, hi = self.lo, self.hi
        if lo is not None and (number < lo or (self.lo_open and number == lo)):
            self.fail(f"{value} must be {'>' if self.lo_open else '≥'} {lo:g}", param, ctx)
        if hi is not None and (number > hi or (self.hi_open and number == hi)):
            self.fail(f"{value} must be {'<' if self.hi_open else '≤'} {hi:g}", param, ctx)
        return number


class JsonObject(click.ParamType):
    """An option holding a JSON object (``'{"method": "ngram"}'``), given as a dict."""

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            obj = loads_strict(value)
        except (ValueError, RecursionError) as exc:
            self.fail(f"not JSON: {describe_exception(exc)}", param, ctx)
        if not isinstance(obj, dict):
            self.fail("must be a JSON object", param, ctx)
        return obj


FINITE_FLOAT = FiniteFloat()


@dataclass(frozen=True)
class Deprecated:
    """A hidden flag kept for old scripts: giving ``flag`` sets field ``path`` to ``value``
    (with a warning naming the flag to use instead)."""

    flag: str
    path: str
    value: Any


def dashed(path: str) -> str:
    """The default flag of a field: its name dashed (``max_model_len`` → ``max-model-len``)."""
    return path.rpartition(".")[2].replace("_", "-")


def _strip(annotation: Any) -> Any:
    """``X | None`` → ``X``; ``Annotated[X, ...]`` → ``X``; others unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip(args[0])
    if typing.get_origin(annotation) is typing.Annotated:
        return _strip(typing.get_args(annotation)[0])
    return annotation


def _is_model(annotation: Any) -> bool:
    base = _strip(annotation)
    return isinstance(base, type) and issubclass(base, BaseModel)


def click_type(annotation: Any) -> click.ParamType:
    """The option type of a field annotation (module docstring)."""
    base = _strip(annotation)
    if typing.get_origin(base) is typing.Literal:
        return click.Choice([str(a) for a in typing.get_args(base)])
    if base is int:
        return click.INT
    if base is float:
        return FINITE_FLOAT
    if base is dict or typing.get_origin(base) is dict:
        return JsonObject()
    if base is Path:  # kept as typed for the model: "dir/" keeps the slash that names a dir
        return click.Path(path_type=str)
    return click.STRING


def _number(value: float) -> str:
    """A bound as help shows it: an integer with every digit, else the shortest float text."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 2**53):
        return str(int(value))
    return f"{value:g}"


def _range_text(field: FieldInfo) -> str:
    """A number field's bounds as its help shows them (``0 < x ≤ 10``), from the field's
    ``gt``/``ge``/``lt``/``le``; empty without any."""
    lo = hi = ""
    for m in field.metadata:
        for attr, op in (("gt", "<"), ("ge", "≤")):
            if getattr(m, attr, None) is not None:
                lo = f"{_number(getattr(m, attr))} {op} "
        for attr, op in (("lt", "<"), ("le", "≤")):
            if getattr(m, attr, None) is not None:
                hi = f" {op} {_number(getattr(m, attr))}"
    return f"{lo}x{hi}" if lo or hi else ""


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"  # the model refuses a missing value with the flag's name
    default = field.get_default(call_default_factory=True)
    if isinstance(default, BaseModel | dict | list | tuple) and not default:
        return "none"
    return f"default: {'none' if default is None else default}"


class ModelOptions(Generic[M]):
    """The options of ``model`` and the model back from their values.

    Args:
        model: the pydantic model.
        flag: field path (``timeouts.idle_s`` when flattened) → flag name without dashes;
            :func:`dashed` by default.
        skip: field paths with no flag (a config file may still set them).
        flatten: nested models' fields become flags; without it they have none.
        given_only: every option defaults to ``None`` so a flag not given leaves the field to
            ``base`` (a config file) or the model's default; otherwise booleans default to the
            model's value.
        deprecated: hidden aliases (:class:`Deprecated`).
    """

    def __init__(
        self,
        model: type[M],
        *,
        flag: Callable[[str], str] = dashed,
        skip: Collection[str] = (),
        flatten: bool = False,
        given_only: bool = False,
        deprecated: Collection[Deprecated] = (),
    ) -> None:
        self.model = model
        self._flag = flag
        self._skip = set(skip)
        self._given_only = given_only
        self._deprecated = tuple(deprecated)
        self.fields: dict[str, FieldInfo] = {}
        self._collect(model, "", flatten)

    def _collect(self, model: type[BaseModel], prefix: str, flatten: bool) -> None:
        own = set(model.__annotations__)
        ordered = sorted(model.model_fields.items(), key=lambda item: item[0] not in own)
        for name, field in ordered:  # the model's own fields first, inherited ones after
            path = f"{prefix}{name}"
            if path in self._skip:
                continue
            if _is_model(field.annotation):
                if flatten:
                    self._collect(_strip(field.annotation), f"{path}.", flatten)
                continue
            self.fields[path] = field

    def flag_of(self, path: str) -> str:
        """The flag of field ``path``, dashes included (``--max-model-len``)."""
        return f"--{self._flag(path)}"

    def options(self) -> list[click.Option]:
        """One click option per field (and the hidden deprecated aliases), named
        ``path.replace(".", "__")`` so :meth:`build` can nest the values back."""
        options = [self._option(path, field) for path, field in self.fields.items()]
        options += [
            click.Option([d.flag, self._alias_name(d)], is_flag=True, hidden=True, default=False)
            for d in self._deprecated
        ]
        return options

    def _option(self, path: str, field: FieldInfo) -> click.Option:
        flag, name = self._flag(path), path.replace(".", "__")
        help_text = field.description or ""
        base = _strip(field.annotation)
        if base is bool:
            default = None if self._given_only else field.default
            return click.Option([f"--{flag}/--no-{flag}", name], default=default,
                                show_default=not self._given_only, help=help_text)  # fmt: skip
        if typing.get_origin(base) in (tuple, list):  # a repeatable flag: --header A --header B
            return click.Option([f"--{flag}", name], multiple=True, default=None,
                                help=f"{help_text} (repeatable)".strip())  # fmt: skip
        shown = "; ".join(t for t in (_default_text(field), _range_text(field)) if t)
        return click.Option([f"--{flag}", name], type=click_type(field.annotation), default=None,
                            help=f"{help_text} [{shown}]".strip())  # fmt: skip

    @staticmethod
    def _alias_name(d: Deprecated) -> str:
        return "deprecated_" + d.flag.lstrip("-").replace("-", "_")

    def given(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The values the user gave, nested by field path (``{"timeouts": {"idle_s": 5}}``):
        ``None`` and an unused repeatable flag (``()``) are left out; a deprecated alias
        sets its field (warning on stderr)."""
        out: dict[str, Any] = {}
        for path in self.fields:
            value = values.get(path.replace(".", "__"))
            if value is not None and value != ():
                _set(out, path, list(value) if isinstance(value, tuple) else value)
        for d in self._deprecated:
            if values.get(self._alias_name(d)):
                click.echo(f"warning: {d.flag} is deprecated; use {self._use_instead(d)}", err=True)
                _set(out, d.path, d.value)
        return out

    def _use_instead(self, d: Deprecated) -> str:
        flag = self._flag(d.path)
        return f"--{flag}" if d.value is not False else f"--no-{flag}"

    def build(self, values: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> M:
        """The model from ``base`` (e.g. a config file's object) overridden by the values
        given on the command line.

        Raises:
            click.UsageError: the result is invalid; one line, each problem naming the flag
                (or, for a value that came from ``base``, its field path).
        """
        given = self.given(values)
        try:
            return self.model.model_validate(_merge(dict(base or {}), given))
        except ValidationError as exc:
            raise click.UsageError(self.describe(exc, given, base)) from None

    def describe(
        self,
        exc: ValidationError,
        given: Mapping[str, Any] | None = None,
        base: Mapping[str, Any] | None = None,
    ) -> str:
        """``exc`` as one line: ``--flag: why (got X)`` per problem, ``; ``-separated; a rule
        across fields with the field names in its message replaced by their flags. A value
        taken from ``base`` and not ``given`` is named by its field path instead."""
        problems = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            path = self._path_of(err["loc"])
            if path is None:
                problems.append(self._flags_in(msg))
                continue
            from_base = _has(base or {}, path) and not _has(given or {}, path)
            typed = path in self.fields and not from_base
            where = self.flag_of(path) if typed else path
            shown = _shown(err.get("input")) if not err["type"].startswith("value_error") else ""
            problems.append(f"{where}: {msg}{shown}")
        return "; ".join(problems)

    def _path_of(self, loc: tuple[int | str, ...]) -> str | None:
        """The longest field path that ``loc`` starts with (list indices dropped)."""
        parts = [p for p in loc if isinstance(p, str)]
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in self.fields:
                return ".".join(parts[:n])
        return ".".join(parts) or None

    def _flags_in(self, msg: str) -> str:
        names = sorted(
            {p.rpartition(".")[2]: p for p in self.fields}.items(),
            key=lambda item: len(item[0]),
            reverse=True,
        )
        if not names:
            return msg
        by_name = dict(names)
        pattern = "|".join(re.escape(n) for n, _ in names)
        return re.sub(rf"(?<![\w-])({pattern})(?![\w-])",
                      lambda m: self.flag_of(by_name[m.group(1)]), msg)  # fmt: skip


def _shown(value: Any) -> str:
    """`` (got X)`` for a scalar input a built-in check refused; empty otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return ""
    return f" (got {value!r})"


def _set(target: dict[str, Any], path: str, value: Any) -> None:
    *groups, name = path.split(".")
    for group in groups:
        target = target.setdefault(group, {})
    target[name] = value


def _has(given: Mapping[str, Any], path: str) -> bool:
    node: Any = given
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied, nested dicts merged key by key."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out
