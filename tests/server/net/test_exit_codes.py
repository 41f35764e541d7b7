"""server.net.exit_codes: every command's exit codes in one module, and the docs written from it.

Before, six modules each defined some (3 and 4 meaning different things per command), and
``gate`` exited 1, which CI reads as a regression, when one of its runs was interrupted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from server.net.exit_codes import (
    BEGIN,
    COMMANDS,
    END,
    PAGE,
    CompareExit,
    GateExit,
    ValidateExit,
    render_table,
    with_table,
)

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("server", "gateway", "metrics", "scenarios", "loadgen", "analysis")
DEFINING = Path("server/net/exit_codes.py")


def test_the_commands_page_holds_the_table_the_module_writes() -> None:
    assert PAGE.read_text() == with_table(PAGE.read_text()), "run: python -m server.net.exit_codes"
    assert render_table() in PAGE.read_text()


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        with_table("# Commands\n")
    assert with_table(f"a\n{BEGIN}\nold\n{END}\nb") == f"a\n{BEGIN}\n{render_table()}{END}\nb"


def test_0_1_2_mean_the_same_everywhere_and_3_4_per_command() -> None:
    # 0 success, 1 failure, 2 usage wherever a command has them (trace stats has no 1).
    meanings = {c: {int(code) for code in codes} for c, codes in COMMANDS.items()}
    assert meanings["run"] == {0, 1, 2, 3} and meanings["validate"] == {0, 1, 2, 4}
    assert meanings["compare"] == {0, 1, 2, 3} and meanings["gate"] == {0, 1, 2, 3, 4, 5}
    assert [(c.name, int(c)) for c in GateExit][:4] == [(c.name, int(c)) for c in CompareExit]
    assert ValidateExit.ATTENTION == GateExit.RUN_NOT_OK == 4  # same number, two meanings


def test_validate_help_lists_its_exit_codes_from_the_module() -> None:
    from loadgen.cli import main

    shown = CliRunner().invoke(main, ["validate", "--help"]).output
    for code in ValidateExit:
        assert f"  {int(code)}  {code.meaning.replace('`', '')[:40]}" in shown


def _literal_exit_codes(path: Path) -> list[str]:
    """Where ``path`` writes an exit code as a number: ``sys.exit(3)``, ``SystemExit(1)``,
    ``exit_code = 2`` (each as ``PATH:LINE: CODE``)."""
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            literal = node.args and isinstance(node.args[0], ast.Constant)
            if name in ("sys.exit", "SystemExit", "exit", "ctx.exit") and literal:
                found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = [ast.unparse(t) for t in node.targets]
            if any("exit" in n.lower() for n in names) and isinstance(node.value.value, int):
                found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_exit_code_is_written_as_a_number_outside_the_module() -> None:
    paths = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    found = [
        hit for p in paths if p.relative_to(ROOT) != DEFINING for hit in _literal_exit_codes(p)
    ]
    assert found == []


def test_the_search_finds_a_number_written_as_an_exit_code(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text("import sys\nGATE_EXIT = 4\nsys.exit(3)\nraise SystemExit(1)\n")
    hits = _literal_exit_codes(module)
    assert [h.split(": ", 1)[1] for h in hits] == ["GATE_EXIT = 4", "sys.exit(3)", "SystemExit(1)"]
