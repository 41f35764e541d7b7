"""Building the report of a run from its raw files: ``report.json``, ``report.md``, plots.

``build_report`` is the single entry point used at the end of a run and by
``loadgen report RUN``; it reads only the run directory, so a rebuild gives the same report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from analysis import breaker, disconnects, plots, preemption
from analysis.checks import evaluate
from analysis.load import RunData, load_run
from analysis.markdown import render_markdown
from analysis.summaries import case_summary
from loadgen.rundir import PLOTS_DIR, REPORT_JSON, REPORT_MD, case_dir


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf → None (JSON has no NaN), numpy scalars → Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def summarize(run_dir: Path, data: RunData | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict (no file written); ``data`` if already loaded."""
    data = data or load_run(run_dir)
    plan = data.plan
    cases = {c.name: case_summary(c, plan.probe_phases, plan.compare_phases) for c in data.cases}
    disconnect_rows = disconnects.section(data.cases)["rows"]
    for spec in plan.cases:
        cases[spec.name]["label"] = spec.label
        cases[spec.name]["planned_phases"] = [p.name for p in plan.phases_of(spec)]
        cases[spec.name]["disconnects"] = [r for r in disconnect_rows if r["case"] == spec.name]
        if spec.gateway is not None and spec.replicas > 1:
            case_data = next(c for c in data.cases if c.name == spec.name)
            cases[spec.name]["breaker"] = [
                breaker.episode(case_data, case_dir(run_dir, spec.name), p)
                for p in case_data.phases
            ]
    verdicts = [v.to_dict() for v in evaluate(plan.checks, cases)]
    extra = {}
    # Present for plans that declare preemption predictions (kv-preemption).
    hand = preemption.section({"cases": cases}, [c.model_dump() for c in plan.checks])
    if hand["rows"]:
        extra["preemption"] = hand
    decided = [v for v in verdicts if v["passed"] is not None]
    return _clean(
        {
            "scenario": plan.scenario,
            "description": plan.description,
            "run": {k: data.run.get(k) for k in ("command", "started_at", "status", "wall_s")},
            "params": plan.params,
            "sizing": plan.sizing,
            "phases": plan.phase_names(),
            "cases": cases,
            "verdicts": verdicts,
            **extra,
            "verdict_summary": {
                "passed": sum(1 for v in decided if v["passed"]),
                "failed": sum(1 for v in decided if not v["passed"]),
                "undecided": len(verdicts) - len(decided),
            },
        }
    )


def build_report(run_dir: Path) -> dict[str, Any]:
    """Write ``report.json``, ``report.md`` and ``plots/*.png`` into ``run_dir``; return it."""
    data = load_run(run_dir)
    report = summarize(run_dir, data)
    plot_dir = run_dir / PLOTS_DIR
    plot_dir.mkdir(exist_ok=True)
    phases = report["phases"]
    ran = [c for c in data.cases if c.records]
    written = []
    if ran:
        written.append(plots.ttft_by_phase(ran, phases, plot_dir / "ttft_by_phase.png"))
        written.append(
            plots.hit_rate_by_phase(report["cases"], phases, plot_dir / "hit_rate_by_phase.png")
        )
    for name, case_report in report["cases"].items():
        for ep in case_report.get("breaker", []):
            path = plot_dir / f"breaker_{name}_{ep['phase']}.png"
            written.append(plots.breaker_episode(ep, path))
    for case in data.cases:
        if case.samples:
            written.append(plots.timeline(case, plot_dir / f"timeline_{case.name}.png"))
    report["plots"] = [p.relative_to(run_dir).as_posix() for p in written]
    (run_dir / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n")
    (run_dir / REPORT_MD).write_text(render_markdown(report))
    return report
