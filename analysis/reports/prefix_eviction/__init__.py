"""prefix-eviction's analysis: hit rates per phase, probe requests, TTFT ratios, its verdicts."""

from analysis.reports.prefix_eviction.report import REPORT

__all__ = ["REPORT"]
