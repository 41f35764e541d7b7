"""Starting, attaching to and stopping a real vLLM server; building the embedded model."""
