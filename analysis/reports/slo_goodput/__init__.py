"""slo-goodput's report: the sweep table, the capacity-planning answer, the collapse, verdicts.

Every figure is computed here from the raw records and samples (definitions in
``analysis.goodput``; measurement windows in ``loadgen.measure``). Figures the run resolved
while it ran (late-bound rates, derived SLOs; ``scenarios.late``) are recomputed from the
raw records with ``analysis.latency``'s metric definitions and compared with what the run
recorded in ``phases.jsonl``: the report uses the recomputed values, and the
``late_figures_agree`` verdict says whether they match.
"""

from analysis.reports.slo_goodput.report import REPORT

__all__ = ["REPORT"]
