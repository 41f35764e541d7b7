"""What tests share: run builders, report-summary builders, fake servers (one vLLM chunk
renderer for all: ``vllm_chunks``) and the real-vLLM tier's fixtures. Import as
``from tests.support.<module> import ...``."""
