"""The load generator: sends scenario requests to an OpenAI-compatible server and records them."""
