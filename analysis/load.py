"""Reading a run directory back: plan, run facts, and per case records, phases and samples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.records import read_records
from loadgen.rundir import (
    CASE_FILE,
    PHASES_FILE,
    PLAN_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    case_dir,
    read_json,
    read_jsonl,
)
from metrics.samples import Sample
from metrics.store import read_samples, read_scrapes
from scenarios.plan import Plan


@dataclass
class CaseData:
    """Raw data of one case, as written by the run."""

    name: str
    info: dict[str, Any]
    records: list[dict[str, Any]]
    phases: list[dict[str, Any]]
    samples: list[Sample]
    scrapes: list[dict[str, Any]]


@dataclass
class RunData:
    """Raw data of a run: its plan, run facts and cases (in plan order)."""

    run_dir: Path
    plan: Plan
    run: dict[str, Any]
    cases: list[CaseData]


def load_run(run_dir: Path) -> RunData:
    """Load everything analysis needs from ``run_dir``.

    Raises:
        FileNotFoundError: ``plan.json`` is missing (not a run directory, or it failed before
            planning).
    """
    plan_path = run_dir / PLAN_FILE
    if not plan_path.exists():
        raise FileNotFoundError(f"{plan_path} not found: not a run directory, or no plan was made")
    plan = Plan.model_validate(read_json(plan_path))
    run = read_json(run_dir / RUN_FILE) if (run_dir / RUN_FILE).exists() else {}
    cases = []
    for spec in plan.cases:
        cdir = case_dir(run_dir, spec.name)
        info = read_json(cdir / CASE_FILE) if (cdir / CASE_FILE).exists() else {}
        records = read_records(cdir / REQUESTS_FILE) if (cdir / REQUESTS_FILE).exists() else []
        cases.append(
            CaseData(
                name=spec.name,
                info=info,
                records=records,
                phases=read_jsonl(cdir / PHASES_FILE),
                samples=read_samples(cdir),
                scrapes=read_scrapes(cdir),
            )
        )
    return RunData(run_dir, plan, run, cases)
