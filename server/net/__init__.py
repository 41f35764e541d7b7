"""What every package shares, importing no other project module: input size limits, a bounded
GET, the one SSE decoder, the one ``/health`` check and wait, the uvloop runner, the one JSONL
appender and its error, every command's exit codes, one-line exception descriptions, URL
passwords redacted."""
