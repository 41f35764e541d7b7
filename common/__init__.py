"""Helpers every package may use (it imports no project package): describing an exception in
one line, and keeping credentials of URLs out of what is written or printed."""
