"""Talking to an HTTP server safely, for every package (it imports no other project module):
input size limits, a bounded GET, the one SSE decoder, one-line exception descriptions, URL
passwords redacted."""
