"""The top-level packages import each other one way only (no cycles), as data flows.

Every ``import`` and ``from … import`` in a package's modules counts, including imports inside
functions (lazy imports still tie packages together). The command line (the ``loadgen/cli/``
package) is the composition root, the one place allowed to import everything, so it is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "gateway", "metrics", "scenarios", "loadgen", "analysis")
#: The command line: the composition root, which may import every package.
COMPOSITION_ROOT = Path("loadgen/cli")

#: What each package may import (data flows scenario → loadgen + metrics → run dir → analysis).
ALLOWED: dict[str, set[str]] = {
    "server": set(),
    # ``server`` only for its leaves, ``server.net`` and ``server.cli_options`` (see LEAVES).
    "gateway": {"server"},
    "metrics": {"server"},
    # ``gateway`` only for ``gateway.routing`` (see ROUTING).
    "scenarios": {"server", "gateway"},
    # ``gateway`` only for the row its events file holds (``gateway.events.GatewayEvent``),
    # which the run format (``loadgen.runformat``) re-exports for the readers.
    "loadgen": {"scenarios", "metrics", "server", "gateway"},
    "analysis": {"loadgen", "metrics", "scenarios", "server", "gateway"},
}

#: The leaves of ``server`` that import no other project module: ``server.net`` (what every
#: package shares: size limits, bounded reads, the SSE decoder, the ``/health`` check and wait,
#: the uvloop runner, the JSONL appender, the exit codes, exceptions described, URL passwords
#: redacted) and ``server.cli_options`` (command-line options from pydantic models). The gateway
#: and the scraper use them and nothing else of ``server``, whose vLLM process management they
#: never see.
LEAVES = ("server.net", "server.cli_options", "server.group_signals")
LEAVES_ONLY = ("gateway", "metrics")

#: ``gateway.routing`` (the routing policies as pure code) imports nothing of the project
#: outside itself, so the fleet model (``scenarios``) and the analysis can run the very
#: function the gateway routes with; they import it and nothing else of ``gateway``.
ROUTING = "gateway.routing"
ROUTING_ONLY = ("scenarios", "analysis")


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


def imported_names(path: Path) -> set[str]:
    """Full dotted names of the project modules or packages ``path`` imports (absolute ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {n for n in found if n.split(".")[0] in PACKAGES}


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package → imported package → modules that import it (relative paths)."""
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in PACKAGES}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.is_relative_to(COMPOSITION_ROOT):
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


def _in(name: str, leaf: str) -> bool:
    """Whether module ``name`` is ``leaf`` or inside it (``server.net.urls`` in ``server.net``)."""
    return name == leaf or name.startswith(f"{leaf}.")


def _leaf_modules(leaf: str) -> list[Path]:
    path = ROOT.joinpath(*leaf.split("."))
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


#: The base leaf: the other leaves may use it (the CLI options read user JSON strictly and
#: describe exceptions with it), and it imports nothing outside itself.
BASE_LEAF = "server.net"


@pytest.mark.parametrize("leaf", LEAVES)
def test_a_leaf_of_server_imports_nothing_outside_itself_and_the_base_leaf(leaf: str) -> None:
    outside = {
        p.relative_to(ROOT).as_posix(): sorted(
            n for n in imported_names(p) if not _in(n, leaf) and not _in(n, BASE_LEAF)
        )
        for p in _leaf_modules(leaf)
    }
    assert {k: v for k, v in outside.items() if v} == {}


@pytest.mark.parametrize("package", LEAVES_ONLY)
def test_gateway_and_metrics_use_only_the_leaves_of_server(package: str) -> None:
    beyond = {
        p.relative_to(ROOT).as_posix(): sorted(
            n
            for n in imported_names(p)
            if n.split(".")[0] == "server" and not any(_in(n, leaf) for leaf in LEAVES)
        )
        for p in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in beyond.items() if v} == {}


def test_gateway_routing_imports_nothing_outside_itself() -> None:
    outside = {
        p.relative_to(ROOT).as_posix(): sorted(
            n for n in imported_names(p) if n != ROUTING and not n.startswith(ROUTING + ".")
        )
        for p in sorted((ROOT / "gateway" / "routing").rglob("*.py"))
    }
    assert outside and {k: v for k, v in outside.items() if v} == {}


@pytest.mark.parametrize("package", ROUTING_ONLY)
def test_scenarios_and_analysis_use_only_gateway_routing_of_gateway(package: str) -> None:
    beyond = {
        p.relative_to(ROOT).as_posix(): sorted(
            n
            for n in imported_names(p)
            if n.split(".")[0] == "gateway" and n != ROUTING and not n.startswith(ROUTING + ".")
        )
        for p in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in beyond.items() if v} == {}


def _module_name(path: Path) -> str:
    """``loadgen/workers.py`` → ``loadgen.workers``; ``loadgen/x/__init__.py`` → ``loadgen.x``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """Project modules (names in ``modules``) that module ``path`` imports, anywhere in it.

    ``from a.b import c`` counts ``a.b.c`` when that is a module, else ``a.b``; a relative
    import is resolved against ``path``'s package.
    """
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        found |= {t for t in targets if t in modules}
    return found


def module_graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of the same top-level ``package`` it imports (the composition
    root left out, as above)."""
    paths = {
        _module_name(p): p
        for p in sorted((ROOT / package).rglob("*.py"))
        if not p.relative_to(ROOT).is_relative_to(COMPOSITION_ROOT)
    }
    names = set(paths)
    return {name: imported_modules(path, names) - {name} for name, path in paths.items()}


def strongly_connected(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import cycles of ``edges``: its strongly connected components of 2+ nodes
    (Tarjan's algorithm), each as the set of modules that import each other round."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_strongly_connected_finds_a_two_module_cycle_and_not_a_chain() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_inside_a_package_have_no_import_cycle(package: str) -> None:
    cycles = [sorted(c) for c in strongly_connected(module_graph(package))]
    assert not cycles, f"import cycle(s) inside {package}: {cycles}"
