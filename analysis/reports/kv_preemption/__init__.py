"""kv-preemption's analysis: the hand calculation, the cases side by side, the KV peak, verdicts."""

from analysis.reports.kv_preemption.report import REPORT

__all__ = ["REPORT"]
