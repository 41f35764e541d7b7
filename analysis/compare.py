"""``loadgen compare``: a baseline and a candidate side, each one run or several pooled, compared
per case, phase and metric, each metric classified (statistics: ``analysis.compare_stats``;
metrics: ``analysis.compare_metrics``; tolerances: ``analysis.gate_file``). The sides are loaded
by ``analysis.compare_runs``, each metric compared by ``analysis.compare_figures``, and the
result is ``analysis.compare_models.Comparison``.

A side is a run directory, or a directory whose subdirectories are run directories (the
repeats of ``loadgen gate``), pooled. Sides are comparable when their plans have the same
**workload hash**: sha256 of the scenario, seed, token space and, per case in plan order, its
role and phases (workload, arrival, settle, faults) — everything that decides what is sent,
nothing about the server (vLLM version, cache size, flags), which is what a gate varies.
Cases and phases are paired by name (``pairs`` maps differently named cases).

Verdicts: a side's verdict of a check is shown as PASS when every run passed it, FAIL when
every run failed it, MIXED otherwise, UNDECIDED when a run could not decide. It is classified
over the block pairs (run N of each side; side by side in order when the runs' names differ)
by McNemar's exact test on the pairs that flipped (``analysis.gate_verdicts``): a regression
only when the pass→fail pairs are too many for chance at the comparison's confidence (6 pairs
all pass→fail at 95 %), an improvement likewise; fewer flips are inconclusive, a pair with a
side undecided counts as neither, and a check whose pairs all agree (passing or failing on
both sides) is no change.

A broken run (``analysis.integrity``: what ``loadgen validate`` calls invalid, except a missing
manifest) is never compared: :class:`CompareError` names its first problem. Only complete runs
are compared: a run whose ``run.json`` status is not ``ok``, that has no
``manifest.json`` (killed before it was sealed) or was sealed by ``loadgen report`` without
one (its raw files not verifiable: ``loadgen.runformat.manifest.unverified_seal``), a case
whose status is not ``ok`` or a phase that is incomplete (``PhaseSummary.incomplete``) is
refused, naming the run and why, unless ``allow_incomplete``; then every metric and verdict
comparison is marked ``incomplete`` and its note names the incomplete runs.

Exit codes (:func:`exit_code`, decided by ``analysis.gate_decision`` from the *key* metrics the
gate file names per scenario and every verdict): 0 no key metric or verdict regressed and every
one is decided; 1 a key metric or a verdict regressed; 3 nothing regressed, but a key metric is
inconclusive or *missing* (its server metric family is absent from a run); with ``strict``
every gated metric is key. Usage errors (not runs, unreadable plans,
workloads that differ, incomplete runs) are raised as :class:`CompareError` for the CLI to turn
into exit code 2.

See docs/compare-and-gates.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from analysis.compare_figures import compare_request_metric, compare_run_metric, run_samples
from analysis.compare_metrics import REQUEST_METRICS, RUN_METRICS
from analysis.compare_models import (
    CLASSES,
    CompareError,
    Comparison,
    MetricComparison,
    SideInfo,
    VerdictComparison,
)
from analysis.compare_runs import (
    RunView,
    check_distinct,
    incomplete_runs,
    load_view,
    run_dirs,
    side_info,
)
from analysis.gate_file import GateConfig
from analysis.gate_paired_keys import paired_key_metrics, paired_runs
from analysis.gate_verdicts import verdict_test


def _side_verdict(values: Sequence[bool | None]) -> str:
    if not values or any(v is None for v in values):
        return "UNDECIDED"
    if all(values):
        return "PASS"
    return "FAIL" if not any(values) else "MIXED"


def _block_pairs(base: Sequence[RunView], cand: Sequence[RunView]) -> list[tuple[RunView, RunView]]:
    """The block pairs a verdict is tested over: runs of the same name (one gate's ``run-N``),
    else the runs side by side in order, up to the fewer side's."""
    names_b = [v.run_dir.name for v in base]
    if sorted(names_b) == sorted(v.run_dir.name for v in cand) and len(set(names_b)) == len(
        names_b
    ):
        return paired_runs(base, cand)
    return list(zip(base, cand, strict=False))


def compare_verdicts(
    base: Sequence[RunView], cand: Sequence[RunView], pairs: Mapping[str, str], confidence: float
) -> list[VerdictComparison]:
    """One entry per check of a paired case seen on either side (module docstring), tested
    over the block pairs at ``confidence`` (``analysis.gate_verdicts``)."""
    out = []
    blocks = _block_pairs(base, cand)
    for b_case, c_case in pairs.items():
        checks = [k[1] for k in base[0].verdicts if k[0] == b_case]
        checks += [k[1] for k in cand[0].verdicts if k[0] == c_case and k[1] not in checks]
        for check in checks:
            b = _side_verdict([v.verdicts.get((b_case, check)) for v in base])
            c = _side_verdict([v.verdicts.get((c_case, check)) for v in cand])
            test = verdict_test([(bv.verdicts.get((b_case, check)),
                                  cv.verdicts.get((c_case, check))) for bv, cv in blocks],
                                confidence)  # fmt: skip
            out.append(VerdictComparison(
                case=b_case, check=check, baseline=b, candidate=c,
                classification=test.classification, blocks=test.blocks,
                left_out=test.left_out, pass_fail=test.pass_fail, fail_pass=test.fail_pass,
                p_regression=test.p_regression, p_improvement=test.p_improvement,
                extra_pairs=test.extra_pairs, note=test.note,
            ))  # fmt: skip
    return out


def _pairs(
    base: Sequence[RunView], cand: Sequence[RunView], explicit: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    b_names = [c.name for c in base[0].plan.cases]
    c_names = [c.name for c in cand[0].plan.cases]
    for b, c in explicit.items():
        if b not in b_names or c not in c_names:
            raise CompareError(
                f"--pair {b}={c}: baseline cases are {b_names}, candidate cases {c_names}"
            )
    pairs = dict(explicit)
    for name in b_names:
        if name not in pairs and name in c_names and name not in pairs.values():
            pairs[name] = name
    unpaired = [f"baseline case {n}" for n in b_names if n not in pairs]
    unpaired += [f"candidate case {n}" for n in c_names if n not in pairs.values()]
    if not pairs:
        raise CompareError(
            f"no case pairs by name (baseline {b_names}, candidate {c_names}); "
            "map them with --pair BASELINE_CASE=CANDIDATE_CASE"
        )
    return pairs, unpaired


def _refuse_incomplete(
    baseline: Sequence[RunView], candidate: Sequence[RunView], allow_incomplete: bool
) -> list[str]:
    """The incomplete runs of both sides, one line each.

    Raises:
        CompareError: a side has no run, or a run is incomplete and ``allow_incomplete`` is
            false.
    """
    if not baseline or not candidate:
        raise CompareError("each side needs at least one run")
    partial = incomplete_runs(baseline, "baseline") + incomplete_runs(candidate, "candidate")
    if partial and not allow_incomplete:
        raise CompareError(
            "refusing to compare runs that did not complete: "
            + "; ".join(partial)
            + "; pass --allow-incomplete to compare anyway (every figure is then marked)"
        )
    return partial


def _workload_notes(b_info: SideInfo, c_info: SideInfo, allow_mismatch: bool) -> list[str]:
    """The note that the workloads differ (none when they match).

    Raises:
        CompareError: they differ and ``allow_mismatch`` is false.
    """
    if b_info.workload_hash == c_info.workload_hash:
        return []
    text = (
        f"the workloads differ (baseline {b_info.workload_hash[:12]}, candidate "
        f"{c_info.workload_hash[:12]}): scenario, seed, token space or a case's phases"
    )
    if not allow_mismatch:
        raise CompareError(text + "; pass --allow-workload-mismatch to compare anyway")
    return [text + " — compared anyway (--allow-workload-mismatch)"]


def _compare_phase(
    baseline: Sequence[RunView],
    candidate: Sequence[RunView],
    cases: tuple[str, str],
    phase: str,
    gate: GateConfig,
) -> list[MetricComparison]:
    """Every gated metric of one paired phase: per-request statistics, then per-run figures."""
    metrics: list[MetricComparison] = []
    b_samples = run_samples(baseline, cases[0], phase)
    c_samples = run_samples(candidate, cases[1], phase)
    for request_metric in REQUEST_METRICS:
        rule = gate.rule(request_metric.name)
        for stat in rule.stats if rule else ():
            found = compare_request_metric(
                request_metric.name, stat, b_samples[request_metric.name],
                c_samples[request_metric.name], cases, phase, gate,
            )  # fmt: skip
            if found is not None:
                metrics.append(found)
    for run_metric in RUN_METRICS:
        got = compare_run_metric(run_metric, baseline, candidate, cases, phase, gate)
        if got is not None:
            metrics.append(got)
    return metrics


def _compare_case(
    baseline: Sequence[RunView],
    candidate: Sequence[RunView],
    cases: tuple[str, str],
    gate: GateConfig,
) -> tuple[list[MetricComparison], list[str]]:
    """The metrics of a paired case's phases paired by name, and its unpaired phases."""
    b_case, c_case = cases
    b_spec = next(c for c in baseline[0].plan.cases if c.name == b_case)
    c_spec = next(c for c in candidate[0].plan.cases if c.name == c_case)
    b_phases = [p.name for p in baseline[0].plan.phases_of(b_spec)]
    c_phases = [p.name for p in candidate[0].plan.phases_of(c_spec)]
    unpaired = [f"{b_case}/{p} (baseline only)" for p in b_phases if p not in c_phases]
    unpaired += [f"{c_case}/{p} (candidate only)" for p in c_phases if p not in b_phases]
    metrics: list[MetricComparison] = []
    for phase in (p for p in b_phases if p in c_phases):
        metrics += _compare_phase(baseline, candidate, cases, phase, gate)
    return metrics, unpaired


def _mark_incomplete(
    metrics: list[MetricComparison], verdicts: list[VerdictComparison], partial: list[str]
) -> tuple[list[MetricComparison], list[VerdictComparison], str]:
    """Every comparison marked as coming from the incomplete runs ``partial``; and the mark."""
    mark = "from an incomplete run: " + "; ".join(partial)
    metrics = [m.model_copy(update={"incomplete": True,
                                    "note": f"{mark}; {m.note}" if m.note else mark})
               for m in metrics]  # fmt: skip
    verdicts = [v.model_copy(update={"incomplete": True,
                                     "note": f"{mark}; {v.note}" if v.note else mark})
                for v in verdicts]  # fmt: skip
    return metrics, verdicts, mark


def compare_sides(
    baseline: Sequence[RunView],
    candidate: Sequence[RunView],
    gate: GateConfig,
    *,
    allow_workload_mismatch: bool = False,
    pairs: Mapping[str, str] | None = None,
    allow_incomplete: bool = False,
    paired: bool = False,
) -> Comparison:
    """Compare loaded sides (module docstring); with ``paired``, also the paired key metrics
    of one gate's block pairs (``analysis.gate_paired_keys``), which then decide.

    Raises:
        CompareError: a side has no run, a run is incomplete (unless allowed), the workloads
            differ (unless allowed), no case pairs, or ``paired`` with sides that are not one
            gate's pairs.
    """
    partial = _refuse_incomplete(baseline, candidate, allow_incomplete)
    b_info, c_info = side_info("baseline", baseline), side_info("candidate", candidate)
    notes = _workload_notes(b_info, c_info, allow_workload_mismatch)
    paired_cases, unpaired = _pairs(baseline, candidate, pairs or {})
    metrics: list[MetricComparison] = []
    for b_case, c_case in paired_cases.items():
        case_metrics, case_unpaired = _compare_case(baseline, candidate, (b_case, c_case), gate)
        unpaired += case_unpaired
        metrics += case_metrics
    verdicts = compare_verdicts(baseline, candidate, paired_cases, gate.confidence)
    keys = paired_key_metrics(baseline, candidate, paired_cases, gate) if paired else None
    if partial:
        metrics, verdicts, mark = _mark_incomplete(metrics, verdicts, partial)
        notes.append(mark + " — compared anyway (--allow-incomplete)")
    counts: dict[str, int] = {k: 0 for k in CLASSES}
    for m in metrics:
        counts[m.classification] += 1
    for v in verdicts:
        counts[v.classification] += 1
    return Comparison(
        scenario=baseline[0].plan.scenario,
        baseline=b_info,
        candidate=c_info,
        workload_match=b_info.workload_hash == c_info.workload_hash,
        settings=gate.model_dump(mode="json"),
        pairs=paired_cases,
        unpaired=unpaired,
        metrics=metrics,
        verdicts=verdicts,
        counts=counts,
        notes=notes,
        paired=keys,
    )


def compare_paths(
    baseline: Path,
    candidate: Path,
    gate: GateConfig,
    *,
    allow_workload_mismatch: bool = False,
    pairs: Mapping[str, str] | None = None,
    allow_incomplete: bool = False,
    paired: bool = False,
) -> Comparison:
    """Load both sides (a run, or a directory of runs each) and compare them.

    Raises:
        CompareError: see :func:`compare_sides`, :func:`run_dirs`, :func:`check_distinct`
            (one run on both sides, or twice on one) and :func:`load_view`.
    """
    base_dirs, cand_dirs = run_dirs(baseline), run_dirs(candidate)
    check_distinct(base_dirs, cand_dirs)
    base = [load_view(p) for p in base_dirs]
    cand = [load_view(p) for p in cand_dirs]
    return compare_sides(
        base, cand, gate, allow_workload_mismatch=allow_workload_mismatch, pairs=pairs,
        allow_incomplete=allow_incomplete, paired=paired,
    )  # fmt: skip
