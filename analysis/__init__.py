"""From a run directory's raw files to statistics, verdicts, reports and plots (pure reads)."""
