"""disconnect-abort's analysis: what client disconnects did to the server, and its verdicts."""

from analysis.reports.disconnect_abort.report import REPORT

__all__ = ["REPORT"]
