"""The top-level packages import each other one way only (no cycles), as data flows.

Every ``import`` and ``from … import`` in a package's modules counts, including imports inside
functions (lazy imports still tie packages together). The command line (``loadgen/cli.py``) is
the composition root and the one module allowed to import everything, so it is left out, with
the commands it registers from their own modules (``loadgen export`` reads a run through
``analysis``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "gateway", "metrics", "scenarios", "loadgen", "analysis")
COMPOSITION_ROOTS = {Path("loadgen/cli.py"), Path("loadgen/export_cli.py")}

#: What each package may import (data flows scenario → loadgen + metrics → run dir → analysis).
ALLOWED: dict[str, set[str]] = {
    "server": set(),
    "gateway": set(),
    "metrics": set(),
    "scenarios": {"server"},
    "loadgen": {"scenarios", "metrics", "server"},
    "analysis": {"loadgen", "metrics", "scenarios", "server"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level project packages that module ``path`` imports (anywhere in the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES}
    return found


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package → imported package → modules that import it (relative paths)."""
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in PACKAGES}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel in COMPOSITION_ROOTS:
                continue
            for other in imported_packages(path) - {package}:
                graph[package].setdefault(other, []).append(rel.as_posix())
    return graph


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``edges`` as a list of nodes (first == last), or ``None``."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_reports_a_two_package_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_top_level_packages_have_no_import_cycle() -> None:
    graph = package_graph()
    cycle = find_cycle({p: set(deps) for p, deps in graph.items()})
    assert cycle is None, " → ".join(cycle or []) + f"\n{graph}"


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_the_data_flow_allows(package: str) -> None:
    unexpected = {
        other: modules
        for other, modules in package_graph()[package].items()
        if other not in ALLOWED[package]
    }
    assert not unexpected, f"{package} imports {unexpected}"
