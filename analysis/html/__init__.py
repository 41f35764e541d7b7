"""HTML pages of a run (report.html) and of a comparison (compare.html): self-contained,
rendered from the same typed models and Markdown as report.md and compare.md."""
