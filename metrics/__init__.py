"""Scraping a server's Prometheus ``/metrics``, storing samples, and pure sample arithmetic."""
