"""The admission arms of the overload scenario: what ``--admission`` names and how each limit
is sized.

An arm is one way of admitting (or not) the traffic the server cannot serve in time:

- ``none``: every request is admitted; the queue grows without bound;
- ``vllm-tokens:L``: vLLM's ``--max-num-queued-tokens L`` (503 once the prompt tokens of the
  requests still in prefill, waiting ones included, reach L);
- ``vllm-reqs:L``: vLLM's ``--max-num-queued-reqs L`` (503 once L requests are unfinished,
  waiting or running);
- ``gateway:L``: the project's gateway in front, ``--max-in-flight L --max-queue 0`` (429 with
  ``Retry-After`` once L requests are forwarded and unfinished).

``L`` is a whole number, or ``xF``: F × the arm's rule of thumb, sized from the run's own
measurements (:func:`rule_of_thumb`). The default arms are :data:`DEFAULT_ARMS`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, cast

from scenarios.late import Measured
from scenarios.values import list_items

ArmKind = Literal["none", "vllm-tokens", "vllm-reqs", "gateway"]

#: The server or gateway flags each limited kind sets (``vllm serve`` / ``loadgen gateway``).
ARM_FLAGS: dict[str, tuple[Literal["server", "gateway"], str]] = {
    "vllm-tokens": ("server", "--max-num-queued-tokens"),
    "vllm-reqs": ("server", "--max-num-queued-reqs"),
    "gateway": ("gateway", "--max-in-flight"),
}

#: The default arms: no admission; vLLM's token limit at its documented rule of thumb; its
#: request limit at the rule and below it (a full batch decodes slower per token, so fewer in
#: flight than Little's law with the SLO bound may keep more of them good); the gateway's at
#: half the rule. Each vLLM arm is a server start (about 40 s here), so the sweep is small.
DEFAULT_ARMS = "none,gateway:x0.5,vllm-tokens:x1,vllm-reqs:x0.25,vllm-reqs:x0.5,vllm-reqs:x1"

_ARM = re.compile(r"^(none|vllm-tokens|vllm-reqs|gateway)(?::(x?)([0-9]+(?:\.[0-9]+)?))?$")
#: Largest limit or multiple of the rule of thumb an arm may name.
MAX_LIMIT = 10**7


@dataclass(frozen=True)
class Arm:
    """One arm: its kind and limit (``limit`` a whole number, or ``multiple`` × the rule of
    thumb; neither for ``none``)."""

    kind: ArmKind
    limit: int | None = None
    multiple: float | None = None

    @property
    def name(self) -> str:
        """The case name: ``none``, ``vllm-tokens-4096``, ``vllm-tokens-x0.5``."""
        if self.kind == "none":
            return "none"
        value = f"x{self.multiple:g}" if self.multiple is not None else str(self.limit)
        return f"{self.kind}-{value}"

    @property
    def text(self) -> str:
        """As ``--admission`` names it."""
        return self.name.replace("-x", ":x").replace(f"{self.kind}-", f"{self.kind}:", 1)


def parse_arms(text: str) -> list[Arm]:
    """``"none,vllm-tokens:x1,gateway:16"`` → the arms, in the order given.

    Raises:
        ValueError: no arm, an empty item between commas, an unknown or malformed arm, a
            limit of 0 or above :data:`MAX_LIMIT`, ``none`` with a limit, a limited kind
            without one, an arm named twice.
    """
    items = list_items(text, "admission arm")
    if not items:
        raise ValueError("no admission arm given; e.g. none,vllm-tokens:x1")
    arms: list[Arm] = []
    for raw in items:
        match = _ARM.match(raw)
        if not match:
            raise ValueError(
                f"admission arm {raw!r}: expected none, vllm-tokens:L, vllm-reqs:L or "
                "gateway:L, with L a whole number or xF (F × the rule of thumb)"
            )
        kind = cast(ArmKind, match.group(1))
        relative, number = match.group(2), match.group(3)
        if kind == "none":
            if number is not None:
                raise ValueError("admission arm none takes no limit")
            arms.append(Arm("none"))
            continue
        if number is None:
            raise ValueError(f"admission arm {kind} needs a limit: {kind}:L or {kind}:xF")
        value = float(number)
        if not 0 < value <= MAX_LIMIT or (not relative and not value.is_integer()):
            raise ValueError(
                f"admission arm {raw!r}: the limit must be a whole number from 1 to "
                f"{MAX_LIMIT} (or xF with F > 0)"
            )
        arms.append(Arm(kind, multiple=value) if relative else Arm(kind, limit=int(value)))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"admission arms named twice: {', '.join(names)}")
    return arms


@dataclass(frozen=True)
class Sizing:
    """What the rules of thumb are made of: where each input comes from.

    ``slo_ttft_ms`` / ``slo_e2el_ms``: given SLO bounds (ms), or ``None`` when derived as
    ``slo_factor`` × the ``unloaded`` phase's TTFT / E2EL p50. ``rate_rps``: the given
    sustainable rate, or ``None`` when measured (the ``saturation`` phase's closed-loop rate).
    """

    slo_ttft_ms: float | None
    slo_e2el_ms: float | None
    slo_factor: float
    rate_rps: float | None
    unloaded: str
    prefill: str
    saturation: str


def rule_of_thumb(kind: str, sizing: Sizing, multiple: float) -> Measured | float:
    """``multiple`` × the rule of thumb of a limited arm, as a figure (or a number when every
    input is given):

    - ``vllm-tokens``: target TTFT (s) × prefill throughput (prompt tokens/s): vLLM's own
      sizing advice for ``--max-num-queued-tokens`` (its scheduler config's docstring): a
      request that finds that many prompt tokens ahead of it waits about the target TTFT;
    - ``vllm-reqs`` and ``gateway``: the requests in flight at the sustainable rate when each
      takes its E2EL bound, rate (req/s) × E2EL SLO (s) (Little's law, L = λW).
    """
    if kind == "vllm-tokens":
        prefill = Measured(phase=sizing.prefill, statistic="prefill_tokens_per_s")
        if sizing.slo_ttft_ms is not None:
            return prefill.model_copy(update={"factor": multiple * sizing.slo_ttft_ms / 1000})
        factor = multiple * sizing.slo_factor / 1000
        return Measured(phase=sizing.unloaded, statistic="ttft_p50_ms", factor=factor,
                        times=prefill)  # fmt: skip
    rate = Measured(phase=sizing.saturation, statistic="closed_loop_rps")
    if sizing.slo_e2el_ms is not None:
        e2el_s = sizing.slo_e2el_ms / 1000
        if sizing.rate_rps is not None:
            return multiple * e2el_s * sizing.rate_rps
        return rate.model_copy(update={"factor": multiple * e2el_s})
    factor = multiple * sizing.slo_factor / 1000
    if sizing.rate_rps is not None:
        return Measured(phase=sizing.unloaded, statistic="e2el_p50_ms",
                        factor=factor * sizing.rate_rps)  # fmt: skip
    return Measured(phase=sizing.unloaded, statistic="e2el_p50_ms", factor=factor, times=rate)


def whole_limit(value: float) -> int:
    """A limit as the flag takes it: rounded up, at least 1 (as ``CaseSpec.resolved``)."""
    return max(1, math.ceil(value))
