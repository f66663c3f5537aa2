# Two commands for a fresh machine: `make demo` (set up + the demo sweep on the embedded reasoner)
# and `make test`. Everything installs into a virtualenv inside the clone ($(VENV), made by
# `python3 -m venv` on first use), so nothing installed elsewhere on the machine is used.
# torch 2.13.0 goes first: its CPU build is on disk, while a plain `torch` requirement with
# no torch installed would pull a multi-GB CUDA build.
VENV ?= .venv
BOOTSTRAP ?= python3
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip install --disable-pip-version-check -q
STAMP := $(VENV)/.tts-setup-stamp
# the venv's tools (pyright's node wrapper, pip's entry points) come first
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup demo test test-slow lint bench extras

setup: $(STAMP)
$(PYTHON):
	$(BOOTSTRAP) -m venv $(VENV)
$(STAMP): pyproject.toml Makefile | $(PYTHON)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev]'
	$(PYTHON) -m search.models fetch smollm2-135m
	$(PYTHON) -m search.runtime.kernel
	touch $(STAMP)

# the slow suite's optional extras: Ray and llama-cpp-python's server (compiles llama.cpp)
extras: setup
	$(PIP) -e '.[ray]'
	CMAKE_ARGS="$${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" $(PIP) -e '.[llamacpp]'

demo: setup
	$(PYTHON) -m reports.demo

test: setup lint
	$(PYTHON) -m pytest -q

test-slow: setup
	$(PYTHON) -m pytest -q -m slow

lint: setup
	$(PYTHON) -m ruff check search verifiers rewards problems training reports tests
	$(PYTHON) -m pyright --pythonpath $(PYTHON)

bench: setup
	$(PYTHON) -m reports.bench.engine
