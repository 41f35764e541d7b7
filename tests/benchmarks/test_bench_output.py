"""Where benchmark results go: a git-ignored ``runs/bench-<UTC time>/``, never a tracked file;
and publishing one run into docs/benchmarks.md (``make bench`` must leave
``git status`` clean, the reference figures change only through ``make bench-publish``).

No benchmark runs here: the runner's benchmarks are replaced by a failed result (which the
report renders without figures), so only the path logic and the publishing are exercised.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness as h
import publish
import pytest
import run_all

MACHINE: dict[str, Any] = {
    "date_utc": "2026-11-30 23:02 UTC", "cpu_model": "AMD EPYC", "cpu_flags": ["avx512f"],
    "avx2": True, "cores": 2, "load_average_1m": 1.7, "niceness": -10, "pinned": True,
    "python": "3.11.7", "aiohttp": "3.14.5", "vllm": "0.32.0",
}  # fmt: skip


def test_default_out_is_a_fresh_ignored_run_directory() -> None:
    # 2026-11-30 23:02:05 UTC → runs/bench-20261130T230205Z, beside the scenarios' run dirs.
    when = datetime(2026, 11, 30, 23, 2, 5, tzinfo=UTC)
    assert h.new_out_dir(when) == h.REPO / "runs" / "bench-20261130T230205Z"
    assert h.DEFAULT_OUT.parent == h.REPO / "runs"
    assert h.DEFAULT_OUT.name.startswith("bench-")
    ignored = (h.REPO / ".gitignore").read_text().split()
    assert "runs/" in ignored, "runs/ must stay git-ignored: benchmarks write there"


def test_results_md_defaults_into_the_run_directory(tmp_path: Path) -> None:
    default = run_all.parse_args([])
    assert default.out == h.DEFAULT_OUT
    assert default.results == h.DEFAULT_OUT / "RESULTS.md"
    chosen = run_all.parse_args(["--out", str(tmp_path)])
    assert chosen.results == tmp_path / "RESULTS.md"


def test_run_all_writes_only_into_out_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_run_one(name: str, script: str, out_dir: Path, tiny: bool) -> dict[str, Any]:
        return {"benchmark": name, "failed": True, "error": "not run in this test", "rows": []}

    monkeypatch.setattr(run_all, "run_one", fake_run_one)
    monkeypatch.setattr(h, "machine", lambda: MACHINE)
    out = tmp_path / "bench-x"
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--only", "gateway", "--out", str(out)])
    assert run_all.main() == 1  # a failed benchmark fails the command
    assert sorted(p.name for p in out.iterdir()) == ["RESULTS.md", "run.json"]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert str(out) in last and "RESULTS.md" in last and "bench-publish" in last


def _run_dir(tmp_path: Path, tiny: bool) -> Path:
    run = tmp_path / "bench-20261130T230205Z"
    run.mkdir()
    info = {"machine": MACHINE, "total_s": 362.0, "tiny": tiny, "lock_held": True}
    (run / "run.json").write_text(json.dumps(info))
    (run / "gateway.json").write_text(
        '{"benchmark": "gateway", "failed": true, "error": "boom", "rows": []}'
    )
    return run


def test_publish_replaces_only_the_marked_section(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(
        f"# Benchmarks\n\nprose above\n\n{publish.BEGIN}\nold figures\n{publish.END}\n\nbelow\n"
    )
    assert publish.main([str(_run_dir(tmp_path, tiny=False)), "--page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nprose above\n\n")
    assert text.endswith(f"{publish.END}\n\nbelow\n")
    assert "old figures" not in text
    section = text.split(publish.BEGIN)[1].split(publish.END)[0]
    # The run's own report, one heading level down, dated, its machine named, no rerun recipe.
    assert "2026-11-30 23:02 UTC" in section and "AMD EPYC" in section
    assert "\n### Headline\n" in section and "\n## " not in section
    assert "# Benchmark results" not in section and "Rerun\n" not in section


def test_publish_refuses_a_smoke_run_and_a_page_without_markers(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(f"{publish.BEGIN}\n{publish.END}\n")
    assert publish.main([str(_run_dir(tmp_path, tiny=True)), "--page", str(page)]) == 2
    assert page.read_text() == f"{publish.BEGIN}\n{publish.END}\n"
    with pytest.raises(publish.PublishError):
        publish.replace_section("no markers here", "figures")


def test_the_published_page_has_its_markers() -> None:
    text = publish.PAGE.read_text()
    assert text.count(publish.BEGIN) == 1 and text.count(publish.END) == 1
