# make demo: set everything up, profile the bundled example, print the report.
# make test: set everything up, run the whole test suite (and the linter).
# Set-up: Debian packages clang-19 and libomp-19-dev (apt-get, as root or via
# sudo), a virtual environment in .venv, ompt-py installed into it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ompt-py-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := clang-19 libomp-19-dev
SOURCES := setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.h)

.PHONY: demo test setup system-deps lint bench clean

demo: setup
	@mkdir -p examples/build
	clang-19 -O2 -g -fopenmp examples/demo.c -o examples/build/demo
	$(BIN)/ompt-py run -o examples/build/demo.parquet -- examples/build/demo
	$(BIN)/ompt-py report examples/build/demo.parquet

test: setup lint
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check ompt_py tests bench runtime setup.py

bench: setup
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/fallback.py

setup: system-deps $(STAMP)

system-deps:
	@if ! command -v clang-19 >/dev/null || [ ! -e /usr/lib/llvm-19/lib/libomp.so.5 ]; then \
	  echo "Installing Debian packages: $(DEBIAN_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEBIAN_PACKAGES); \
	fi

$(STAMP): $(SOURCES)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

clean:
	rm -rf build examples/build bench/build ompt_py/*.so *.egg-info
