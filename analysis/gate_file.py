"""Gate files: the tolerances and statistics settings of ``loadgen compare`` (TOML).

The defaults live in ``analysis/gate_defaults.toml`` (its comments document the format); a
user's file is read the same way and overrides them key by key: top-level settings replace the
defaults', and each ``[metrics.NAME]`` table is merged into the default table of that name.
Unknown keys and metrics are errors, so a typo never silently keeps a default; so are settings
that would be ignored or could never classify: ``stats`` (or a ``metric.stat`` key) on a per-run
figure, which has one value per run and no statistics to choose, an unknown statistic, and a
tolerance that is not a finite number ≥ 0 (``inf`` would call every change "no change").

``[key_metrics]`` names, per scenario (``default`` for the rest), the metrics that decide the
headline (``analysis.gate_decision``); a user's list for a scenario replaces that scenario's
list. A selector is a metric (``ttft_ms``: every statistic compared; ``num_preemptions``: a
per-run figure) or a per-request metric and statistic (``ttft_ms.p50``); unknown ones are errors.

``[paired]`` holds the tolerances of a paired gate's few key metrics
(``analysis.gate_paired_keys``), merged key by key; an unknown metric is an error.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.compare_metrics import REQUEST_METRICS, RUN_METRICS
from analysis.compare_stats import Statistic
from analysis.gate_paired import PAIRED_METRICS
from server.net.input_files import read_bounded

DEFAULTS_FILE = Path(__file__).with_name("gate_defaults.toml")


#: Most bootstrap resamples a gate file may ask for: 50 × the default 2,000; the cost of a
#: comparison grows linearly with them, and the bootstrap holds one figure per resample.
MAX_RESAMPLES = 100_000


class GateFileError(ValueError):
    """A gate file that cannot be read or does not validate; the message names the file."""


class MetricRule(BaseModel):
    """How one metric is gated.

    Attributes:
        tolerance: relative (latencies, throughput) or absolute (fractions, counts) band
            around "no change", ≥ 0.
        gate: whether a regression (or a missing family) of this metric fails the gate.
        stats: for per-request metrics, the statistics compared.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    tolerance: float = Field(ge=0, allow_inf_nan=False)
    gate: bool = True
    stats: tuple[Statistic, ...] = ()


class GateConfig(BaseModel):
    """A whole gate file (see ``gate_defaults.toml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    resamples: int = Field(default=2000, ge=1000, le=MAX_RESAMPLES)
    seed: int = Field(default=0, ge=0)  # numpy's seeds are ≥ 0
    min_samples: int = Field(default=10, ge=1)
    min_tail_samples: int = Field(default=2, ge=1)
    metrics: dict[str, MetricRule]
    key_metrics: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    paired: dict[str, float] = Field(default_factory=dict)

    def key_selectors(self, scenario: str) -> tuple[str, ...]:
        """The key-metric selectors of ``scenario`` (its own list, else ``default``)."""
        return self.key_metrics.get(scenario, self.key_metrics.get("default", ()))

    def rule(self, metric: str, stat: str | None = None) -> MetricRule | None:
        """The rule of ``metric`` (``metric.stat`` first when a statistic is given)."""
        if stat is not None and f"{metric}.{stat}" in self.metrics:
            base = self.metrics.get(metric)
            specific = self.metrics[f"{metric}.{stat}"]
            return specific if base is None else specific.model_copy(update={"stats": base.stats})
        return self.metrics.get(metric)


#: Largest gate file read (bytes): 1 MiB, hundreds of times the defaults' size; a bigger
#: file, or a device such as /dev/zero, is refused instead of read without end.
GATE_FILE_MAX_BYTES = 2**20


def _read(path: Path) -> dict[str, Any]:
    try:
        text = read_bounded(path, GATE_FILE_MAX_BYTES, "a gate file").decode("utf-8")
        return tomllib.loads(text)
    except OSError as exc:  # its strerror says what a path that is no file is
        raise GateFileError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:  # too large, not UTF-8, not TOML
        raise GateFileError(f"{path}: {exc}") from None


_PER_REQUEST = tuple(m.name for m in REQUEST_METRICS)
_PER_RUN = tuple(m.name for m in RUN_METRICS)


def _selector_problems(key_metrics: Any) -> list[str]:
    """Key-metric selectors that name no metric (or a statistic of a per-run figure)."""
    if not isinstance(key_metrics, dict):
        return ["[key_metrics] must be a table of scenario = [selectors]"]
    out = []
    for scenario, selectors in key_metrics.items():
        if not isinstance(selectors, list):
            out.append(f"[key_metrics] {scenario}: a list of metric selectors")
            continue
        for sel in selectors:
            base, _, stat = str(sel).partition(".")
            if base not in _PER_REQUEST + _PER_RUN:
                out.append(f"[key_metrics] {scenario}: unknown metric {sel!r}; known: "
                           + ", ".join(_PER_REQUEST + _PER_RUN))  # fmt: skip
            elif stat and (base in _PER_RUN or stat not in get_args(Statistic)):
                out.append(f"[key_metrics] {scenario}: {sel!r} names no statistic compared "
                           f"(statistics: {', '.join(get_args(Statistic))}, of "
                           f"{', '.join(_PER_REQUEST)})")  # fmt: skip
    return out


def _shape_problems(metrics: dict[str, Any]) -> list[str]:
    """Keys and settings a gate file may not hold although each value is well typed."""
    out = []
    for name, table in metrics.items():
        base, _, stat = name.partition(".")
        per_run = base not in _PER_REQUEST
        if stat and stat not in get_args(Statistic):
            out.append(f"[metrics.\"{name}\"]: unknown statistic {stat!r}; known: "
                       + ", ".join(get_args(Statistic)))  # fmt: skip
        elif stat and per_run:
            out.append(f"[metrics.\"{name}\"]: {base} is a per-run figure (one value per run) "
                       f"with no statistics; set its tolerance in [metrics.{base}]")  # fmt: skip
        if per_run and isinstance(table, dict) and table.get("stats"):
            out.append(f"[metrics.{name}] stats: {base} is a per-run figure (one value per run), "
                       "so no statistic is chosen; stats apply to the per-request metrics "
                       + ", ".join(_PER_REQUEST))  # fmt: skip
    return out


def _paired_problems(paired: Any) -> list[str]:
    """``[paired]`` keys that name no paired key metric, or tolerances that are not ≥ 0."""
    if not isinstance(paired, dict):
        return ["[paired] must be a table of metric = tolerance"]
    out = []
    for name, tol in paired.items():
        if name not in PAIRED_METRICS:
            out.append(f"[paired] unknown metric {name!r}; known: {', '.join(PAIRED_METRICS)}")
        elif isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol < 1e9:
            out.append(f"[paired] {name}: a tolerance is a finite number ≥ 0 (got {tol!r})")
    return out


def load_gate(path: Path | None = None) -> GateConfig:
    """The defaults, overridden by the gate file at ``path`` when given.

    Raises:
        GateFileError: unreadable TOML, an unknown key, metric or statistic, ``stats`` on a
            per-run figure, a key-metric selector that names no metric, or an invalid value
            (a tolerance below 0 or not finite).
    """
    data = _read(DEFAULTS_FILE)
    known = set(data.get("metrics", {}))
    if path is not None:
        user = _read(path)
        for key, value in user.items():
            if key in ("key_metrics", "paired") and isinstance(value, dict):
                data[key] = {**data.get(key, {}), **value}
            elif key != "metrics":
                data[key] = value
        for name, table in (user.get("metrics") or {}).items():
            base_name = name.split(".", 1)[0]
            if base_name not in known:
                raise GateFileError(
                    f"{path}: unknown metric {name!r}; known: {', '.join(sorted(known))}"
                )
            if not isinstance(table, dict):
                raise GateFileError(f"{path}: [metrics.{name}] must be a table")
            merged = {**data["metrics"].get(name, {}), **table}
            if "." in name and "tolerance" not in merged:
                merged["tolerance"] = data["metrics"][base_name]["tolerance"]
            data["metrics"][name] = merged
    where = path or DEFAULTS_FILE
    shape = _shape_problems(data.get("metrics") or {})
    shape += _selector_problems(data.get("key_metrics", {}))
    shape += _paired_problems(data.get("paired", {}))
    if shape:
        raise GateFileError(f"{where}: " + "; ".join(shape))
    try:
        return GateConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise GateFileError(f"{where}: {problems}") from None
