# Two commands a newcomer types: `make demo` and `make test`. Both set themselves up.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-ray test lint typecheck layers unit clean setup browser

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# A CPU torch first, unless one is present: a looser pin would pull GBs of CUDA packages.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m trainmaster.cli.demo

# The same demo on a 3-node Ray cluster started on this machine (loopback only): the ray engine.
demo-ray: $(STAMP)
	$(BIN)/python -m trainmaster.cli.demo --ray --out out/demo-ray --timeout 600

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

# The dashboard's browser tests drive Debian's chromium (never a downloaded browser); as root we install it,
# otherwise those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "no chromium (install Debian's chromium package): the browser tests will be skipped"

unit: $(STAMP) browser
	$(BIN)/pytest -q --durations=20

test: lint typecheck layers unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
