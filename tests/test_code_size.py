"""No module of the project is over 600 lines and no function over 80.

Small modules and short functions keep the code readable and each piece testable; this test
keeps them so. It reads every ``.py`` file of the packages and of the tests (the code a change
touches), counts a module's lines and a function's lines from its ``def`` to its last line
(decorators are declarations, such as a command's options, and are not counted; nested
functions count in their parent and again on their own), and names every offender with its
size.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The project's code: its packages and its tests.
TREES = ("server", "gateway", "metrics", "scenarios", "loadgen", "analysis", "tests")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def project_modules() -> list[Path]:
    """Every ``.py`` file under :data:`TREES`, sorted."""
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def function_sizes(source: str) -> list[tuple[str, int, int]]:
    """``(qualified name, def line, lines)`` of every function and method in ``source``; a
    function's lines run from its ``def`` to its last line."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def offenders(paths: list[Path]) -> list[str]:
    """One line per module over :data:`MAX_MODULE_LINES` lines and per function over
    :data:`MAX_FUNCTION_LINES`, naming it and its size."""
    out = []
    for path in paths:
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
        for name, first, size in function_sizes(source):
            if size > MAX_FUNCTION_LINES:
                out.append(f"{where}:{first} {name}: {size} lines (at most {MAX_FUNCTION_LINES})")
    return out


def test_the_size_check_names_each_offender_with_its_size(tmp_path: Path) -> None:
    # long_one: its def line + 80 = 81 lines (over); K.fits: def + 79 = 80 lines, its
    # decorator not counted (at the limit, not named); the module: 81 + 82 (class) + 438 =
    # 601 lines (over).
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    long_function = f"def long_one() -> None:\n{body}\n"
    just_fits = "class K:\n    @staticmethod\n    def fits() -> None:\n" + "        pass\n" * 79
    module = tmp_path / "big.py"
    module.write_text(long_function + just_fits + "# filler\n" * 438)
    assert offenders([module]) == [
        f"{module}: 601 lines (at most 600)",
        f"{module}:1 long_one: 81 lines (at most 80)",
    ]
    module.write_text(long_function.replace("    x79 = 79\n", "") + just_fits)
    assert offenders([module]) == []  # 80 and 80 lines: both at the limit


def test_no_module_over_600_lines_and_no_function_over_80() -> None:
    found = offenders(project_modules())
    assert not found, "too large (split by responsibility):\n" + "\n".join(found)
