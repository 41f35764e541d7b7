"""vLLM's KV-cache events: decoding the ZMQ publisher's messages (:mod:`.wire`) and
recording them into a case directory (:mod:`.recorder`). docs/fleet.md describes them."""
