"""Turning a scenario's pydantic ``Params`` model into click options, and back.

Every field becomes ``--field-name`` (booleans ``--flag/--no-flag``) with the field's
description as help; values are validated by the model, and validation errors become usage
errors before any server starts or any load is sent.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

import click
from pydantic import BaseModel, ValidationError


def _base_type(annotation: Any) -> Any:
    """``int | None`` → ``int``; other annotations unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def options_for(model: type[BaseModel]) -> list[click.Option]:
    """One click option per field of ``model`` (defaults shown, parsed as strings/ints/floats).

    Fields the model declares itself come first, inherited (shared) ones after them.
    """
    opts = []
    own = set(model.__annotations__)
    ordered = sorted(model.model_fields.items(), key=lambda item: item[0] not in own)
    for name, field in ordered:
        flag = name.replace("_", "-")
        base = _base_type(field.annotation)
        help_text = field.description or ""
        if base is bool:
            opts.append(
                click.Option(
                    [f"--{flag}/--no-{flag}", name],
                    default=field.default,
                    show_default=True,
                    help=help_text,
                )
            )
            continue
        if typing.get_origin(base) in (tuple, list):  # a repeatable flag: --header A --header B
            opts.append(
                click.Option(
                    [f"--{flag}", name],
                    multiple=True,
                    default=None,
                    help=f"{help_text} (repeatable)",
                )
            )
            continue
        click_type = {int: click.INT, float: click.FLOAT}.get(base, click.STRING)
        shown = (
            "required"  # the model refuses a missing value with the flag's name
            if field.is_required()
            else f"default: {'none' if field.default is None else field.default}"
        )
        opts.append(
            click.Option(
                [f"--{flag}", name],
                type=click_type,
                default=None,
                help=f"{help_text} [{shown}]",
            )
        )
    return opts


def params_from_options(model: type[BaseModel], values: dict[str, Any]) -> BaseModel:
    """Validate the options given on the command line (unset ones keep the model defaults).

    Raises:
        click.UsageError: a value is invalid; the message names the flag and the reason.
    """
    given = {
        k: v
        for k, v in values.items()
        if k in model.model_fields and v is not None and v != ()  # () = a repeatable flag unused
    }
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if loc:
                problems.append(f"--{loc.replace('_', '-')}: {msg}")
            else:  # a rule across fields: name them as the flags the user typed
                names = "|".join(sorted(model.model_fields, key=len, reverse=True))
                msg = re.sub(
                    rf"(?<![\w-])({names})(?![\w-])",
                    lambda m: "--" + m.group(1).replace("_", "-"),
                    msg,
                )
                problems.append(msg)
        raise click.UsageError("; ".join(problems)) from None
