"""overload's report: every arm at every load (goodput, attainment of the admitted requests,
rejections and why, how fast, with which retry hint), the limits beside their rules of thumb,
the recommended limit per load, and the verdicts.

Every figure is computed here from the raw records and samples; every latency counts from
the request's scheduled time (``analysis.reports.overload.details``).
"""

from analysis.reports.overload.report import REPORT

__all__ = ["REPORT"]
