"""Scenarios as data: what to send (phases, workloads, arrivals), where (cases), what to expect."""
