"""The documentation holds together: a short README, links that resolve, no references to
files users never see.

- README.md is a guide of at most 12 KiB (12,288 bytes); the rest lives in docs/.
- Every relative Markdown link in README.md and docs/**/*.md names an existing file, and a
  ``#fragment`` names a heading of that file (GitHub's anchors: lower case, punctuation
  dropped, spaces as hyphens); docs/index.md links every page; each scenario has its page.
- No tracked source or documentation file mentions the scenario specification kept outside
  the repository (its file name, or the shared folder it sits in): users never see it, so
  docstrings point to the docs/ pages instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.doc_names import unresolved_names

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_MAX_BYTES = 12 * 1024

#: Files users never see; naming the forbidden strings here would trip the check on this file.
FORBIDDEN = ("SCENARIOS" + ".md", "../" + "shared")

#: ``[text](target)`` and ``![alt](target)``; the target up to whitespace or ``)``.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def markdown_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def links(text: str) -> list[str]:
    """Link targets of a Markdown text, outside code blocks and inline code."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: e.g. "`clock_offsets.jsonl`" → "clock_offsetsjsonl",
    "Workers across hosts on Ray" → "workers-across-hosts-on-ray"."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of ``path``, with GitHub's ``-1``, ``-2`` suffixes for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_anchor_rules() -> None:
    assert anchor("`clock_offsets.jsonl`") == "clock_offsetsjsonl"
    assert anchor("`gateway.log`, `gateway_events.jsonl`") == "gatewaylog-gateway_eventsjsonl"
    assert anchor("What `loadgen validate` checks") == "what-loadgen-validate-checks"
    assert anchor("prefix-eviction (the main job)") == "prefix-eviction-the-main-job"


def test_readme_is_a_short_guide() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, the limit is {README_MAX_BYTES}"


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: …
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(REPO)}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_index_lists_every_page() -> None:
    index = REPO / "docs" / "index.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for t in links(index.read_text())}
    pages = {p.resolve() for p in (REPO / "docs").rglob("*.md")} - {index.resolve()}
    missing = sorted(p.relative_to(REPO).as_posix() for p in pages - listed)
    assert not missing, f"docs/index.md does not link: {missing}"


def test_every_scenario_has_its_page() -> None:
    from scenarios.registry import SCENARIOS

    missing = [n for n in SCENARIOS if not (REPO / "docs" / "scenarios" / f"{n}.md").exists()]
    assert not missing, f"scenarios without a docs/scenarios/<name>.md page: {missing}"


def tracked_files() -> list[Path]:
    """Tracked .py, .md, .toml files and Makefiles (the working tree's, when git can say)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            capture_output=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        names = [REPO / n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):  # not a git checkout: walk the tree
        names = [p for p in REPO.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts]
    return [
        p for p in names
        if p.is_file() and (p.suffix in (".py", ".md", ".toml") or p.name == "Makefile")
    ]  # fmt: skip


def test_no_file_points_to_files_users_never_see() -> None:
    found = []
    for path in tracked_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for needle in FORBIDDEN:
            for lineno, line in enumerate(text.splitlines(), 1):
                if needle in line:
                    found.append(f"{path.relative_to(REPO)}:{lineno}: {needle}")
    assert not found, "point to the docs/ page instead:\n" + "\n".join(found)


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_backticked_paths_and_dotted_names_resolve(page: Path) -> None:
    bad = unresolved_names(REPO, page.read_text(encoding="utf-8"))
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


def test_a_renamed_module_path_or_dotted_name_is_caught() -> None:
    text = (
        "The runner is `loadgen/run.py`, the old one `loadgen/orchestrate.py`; placeholders "
        "`scenarios/<name>.py` and `analysis/reports/<scenario>/` resolve, `analysis/reports/"
        "<name>.py` does not (only `__init__.py` is there). Names: `loadgen.runformat.layout`, "
        "`scenarios.registry.SCENARIOS`, `loadgen.client.open_session`, `analysis.preemption`."
        " Files and other projects are not names: `server.json`, `benchmarks/serve.py`."
    )
    assert unresolved_names(REPO, text) == [
        "`loadgen/orchestrate.py`: no such file or folder",
        "`analysis/reports/<name>.py`: no such file or folder",
        "`loadgen.client.open_session`: no such module or attribute",
        "`analysis.preemption`: no such module or attribute",
    ]


#: A number from a tracker users never see ("issue" or "Issue", a space, an optional "#", digits).
_ISSUE_NUMBER = re.compile(r"\b[Ii]ssue" + r" #?\d+")


def test_no_file_points_to_an_issue_number() -> None:
    found = [
        f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:80]}"
        for path in tracked_files()
        for lineno, line in enumerate(
            path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        )
        if _ISSUE_NUMBER.search(line)
    ]
    assert not found, "say what the code does instead of naming an issue:\n" + "\n".join(found)
