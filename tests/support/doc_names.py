"""Backticked code names in the docs, resolved against the tree.

Two kinds of name are checked, both only inside single backticks outside fenced blocks:

- **paths** whose first part is one of the project's top-level folders and that name a
  source file, page or folder (``loadgen/run.py``, ``analysis/reports/<scenario>/``): the
  file or folder must exist. A part written as a placeholder (``<name>``, ``NAME``,
  ``CASE``, ``*``) matches any name but a dunder file, so ``scenarios/<name>.py`` stands for
  the scenario modules, not for ``__init__.py``;
- **dotted names** whose first part is one of the project's packages
  (``loadgen.client.open_session``): the longest importable module prefix is imported and
  the rest must resolve as attributes. A name ending in a file suffix (``server.json``,
  ``gateway.log``) is a file name, not a dotted name.

Paths of other projects (vLLM's ``benchmarks/serve.py``) and of the run directory
(``cases/NAME/phases.jsonl``) start with other folders or name data files, and are not
checked here.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from pathlib import Path

PACKAGES = ("loadgen", "server", "scenarios", "metrics", "analysis", "gateway", "tests")
TOP_FOLDERS = (*PACKAGES, "docs")
#: A dotted span ending in one of these is a file name (``server.json``), not a dotted name.
FILE_SUFFIXES = frozenset(
    {"json", "jsonl", "md", "log", "py", "gz", "png", "svg", "html", "txt", "toml", "csv"}
    | {"parquet", "lock", "yaml", "yml", "sh"}
)

CODE_SUFFIXES = frozenset({"py", "md", "toml"})

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`([^`\n]+)`")
_PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z_]*|\*)$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def code_spans(text: str) -> list[str]:
    """The contents of the inline code spans of a Markdown text, outside fenced blocks."""
    return _CODE.findall(_FENCE.sub("", text))


def project_path(span: str) -> str | None:
    """``span`` as a path into the project's folders, or None when it is not one."""
    if " " in span or "/" not in span or "://" in span:
        return None
    last = span.rstrip("/").rsplit("/", 1)[-1]
    if "." in last and last.rsplit(".", 1)[1] not in CODE_SUFFIXES:
        return None  # a run directory's file (``metrics/samples.jsonl``), not the project's
    return span if span.split("/", 1)[0] in TOP_FOLDERS else None


def project_dotted_name(span: str) -> str | None:
    """``span`` (a trailing ``()`` dropped) as a dotted name in the project's packages."""
    name = span.removesuffix("()")
    if not _DOTTED.match(name) or name.split(".", 1)[0] not in PACKAGES:
        return None
    return None if name.rsplit(".", 1)[1] in FILE_SUFFIXES else name


def _matches(parent: Path, part: str) -> list[Path]:
    if not parent.is_dir():
        return []
    if _PLACEHOLDER.match(part):
        return [p for p in parent.iterdir() if not p.name.startswith("__")]
    stem, dot, suffix = part.partition(".")
    if _PLACEHOLDER.match(stem) and dot:
        return [p for p in parent.glob(f"*.{suffix}") if not p.name.startswith("__")]
    if any(ch in part for ch in "<>*"):
        pattern = re.sub(r"<[^>]+>", "*", part)
        return [p for p in parent.iterdir() if fnmatch.fnmatch(p.name, pattern)]
    return [parent / part] if (parent / part).exists() else []


def path_exists(root: Path, path: str) -> bool:
    """Whether ``path`` (relative to ``root``, placeholders allowed) names something there."""
    found = [root]
    for part in path.rstrip("/").split("/"):
        found = [m for p in found for m in _matches(p, part)]
        if not found:
            return False
    return not path.endswith("/") or any(p.is_dir() for p in found)


def dotted_name_resolves(name: str) -> bool:
    """Whether ``name`` is an importable module, or a module's attribute chain."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def unresolved_names(root: Path, text: str) -> list[str]:
    """Every backticked project path or dotted name of ``text`` that does not resolve."""
    bad = []
    for span in code_spans(text):
        if (path := project_path(span)) is not None:
            if not path_exists(root, path):
                bad.append(f"`{span}`: no such file or folder")
        elif (name := project_dotted_name(span)) is not None and not dotted_name_resolves(name):
            bad.append(f"`{span}`: no such module or attribute")
    return bad
