# Everything runs in a local virtual environment (.venv) built from scratch.
# torch is pinned to the CPU build first, and fairseq-fixed and the plugin are built without
# build isolation so that neither pulls a multi-GB CUDA torch (the plugin compiles its C++ GRU
# loop against the torch installed here).  Another torch: make install TORCH="torch==2.5.1".
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
# fairseq 0.12.2 does not build on Python >= 3.11; fairseq-fixed is the same code, patched to build.
FAIRSEQ ?= $(shell $(PYTHON) -c 'import sys; print("fairseq-fixed==0.12.3.1" if sys.version_info >= (3, 11) else "fairseq==0.12.2")')
DEMO_EPOCHS ?= 8
# the test suite on every core, each worker on one thread (make test TEST_WORKERS=1 for one process)
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)))')

.PHONY: install demo test lint docs benchmark clean-venv

$(VENV)/.installed: setup.py $(wildcard fairseq_monoattn/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" cython numpy setuptools wheel
	$(PY) -m pip install --quiet --no-build-isolation "$(FAIRSEQ)"
	$(PY) -m pip install --quiet --no-build-isolation --use-pep517 -e ".[test,plots,slurm,dev]"
	touch $@

install: $(VENV)/.installed

# The main job: OneStep attention against relative attention on ReCopy (trained on lengths 5-10),
# both scored at lengths 15, 30 and 100.
demo: install
	$(VENV)/bin/fairseq-monoattn-run recopy --arch gru_onestep gru_relative --seeds 1 --max-epoch $(DEMO_EPOCHS) \
		--jobs 2 --work work/demo --results work/demo/results

# The test command: style, the documentation site (links and anchors checked), the test suite.
test: lint docs
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 tests

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir $(CURDIR)/work/site

benchmark: install
	$(PY) examples/benchmark.py

clean-venv:
	rm -rf $(VENV)
