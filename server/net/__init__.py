"""What every package shares, importing no other project module: input size limits, a bounded
GET, the one SSE decoder, the one ``/health`` check and wait, the uvloop runner, one-line
exception descriptions, URL passwords redacted."""
