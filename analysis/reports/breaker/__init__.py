"""breaker's analysis: the episode (faults, gateway transitions, traffic per second), verdict."""

from analysis.reports.breaker.report import REPORT

__all__ = ["REPORT"]
