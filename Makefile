# Everything runs in a local virtual environment (.venv) built from scratch.
# torch is pinned to the CPU build first, and fairseq-fixed is built without build isolation
# so that neither pulls a multi-GB CUDA torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
FAIRSEQ ?= fairseq-fixed==0.12.3.1

.PHONY: install demo test benchmark clean-venv

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" cython numpy setuptools wheel
	$(PY) -m pip install --quiet --no-build-isolation "$(FAIRSEQ)"
	$(PY) -m pip install --quiet -e ".[test,plots]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) examples/demo.py

test: install
	$(PY) -m pytest -q tests

benchmark: install
	$(PY) examples/benchmark.py

clean-venv:
	rm -rf $(VENV)
