"""spec-decode's analysis: acceptance, the speedup model, the recommendation, its verdicts."""

from analysis.reports.spec_decode.report import REPORT

__all__ = ["REPORT"]
