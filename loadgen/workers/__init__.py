"""Load-generator workers: one worker's runtime and the pool interface (``base``), worker
processes on this host and the coordinator that splits and merges a phase (``process``), and
Ray actors across hosts (``ray``; Ray imported only there)."""
