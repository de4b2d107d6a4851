# make demo: set everything up, profile the bundled example, print the report.
# make test: set everything up, run the whole test suite (and the linter).
# Set-up: Debian packages clang-19 and libomp-19-dev (apt-get, as root or via
# sudo), a virtual environment in .venv, ompt-py installed into it.
# make old-runtimes (part of make test): libomp 14 and 16 unpacked into
# .cache/libomp/N for tests/tool/test_versions.py (they conflict with libomp5-19, so
# they are never installed); without them those tests are skipped.
# make test-old-libomp (part of make test): the host-side tests (marked
# any_libomp) once more, every traced process on libomp $(OLD_TEST_LIBOMP)
# (OMPTPY_TEST_LIBOMP, see tests/conftest.py).  Only 16 passes whole: libomp
# 14 has no dispatch events, which several of those tests count.
# make test-sanitize (not part of make test): tests/tool/test_tool_c.py with the tool
# built with AddressSanitizer and UBSan (gcc, -O1 -g) into build/sanitize/ and
# their runtime preloaded into the traced programs (OMPTPY_TEST_TOOL and
# OMPTPY_TEST_PRELOAD, see tests/conftest.py); any error fails the program, and
# leaks are reported except libomp's own (tests/lsan.supp); then the Python-stack
# capture, in a sanitized copy of the package, on tests/programs/pystacks_app.py.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ompt-py-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := clang-19 libomp-19-dev
OLD_LIBOMP_VERSIONS := 14 16
OLD_LIBOMP_DIR := .cache/libomp
OLD_TEST_LIBOMP ?= 16
SOURCES := setup.py pyproject.toml $(wildcard csrc/*/*.c csrc/*/*.h)

SANITIZE_DIR := build/sanitize
SANITIZE_PY := $(SANITIZE_DIR)/py
PY_INCLUDE = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT_SUFFIX = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
SANITIZE_CFLAGS := -std=c11 -O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror \
  -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

.PHONY: demo test test-old-libomp test-sanitize setup system-deps old-runtimes lint bench clean

demo: setup
	@mkdir -p examples/build
	clang-19 -O2 -g -fopenmp examples/demo.c -o examples/build/demo
	$(BIN)/ompt-py run -o examples/build/demo.parquet -- examples/build/demo
	$(BIN)/ompt-py report examples/build/demo.parquet

test: setup lint old-runtimes
	$(BIN)/python -m pytest -q
	@$(MAKE) --no-print-directory test-old-libomp

test-old-libomp: setup
	@lib=$(OLD_LIBOMP_DIR)/$(OLD_TEST_LIBOMP); \
	if [ -e $$lib/libomp.so.5 ]; then \
	  echo "Host-side tests on libomp $(OLD_TEST_LIBOMP): OMPTPY_TEST_LIBOMP=$$lib pytest -m any_libomp"; \
	  OMPTPY_TEST_LIBOMP=$$lib $(BIN)/python -m pytest -q -m any_libomp; \
	else \
	  echo "Skipping the host-side tests on libomp $(OLD_TEST_LIBOMP): $$lib/libomp.so.5 is missing" \
	       "(make old-runtimes fetches it)"; \
	fi

test-sanitize: setup
	@mkdir -p $(SANITIZE_DIR)
	gcc $(SANITIZE_CFLAGS) -Icsrc/include -shared -Wl,-soname,libomptpy.so -Wl,-z,defs \
	  -o $(SANITIZE_DIR)/libomptpy.so $(wildcard csrc/tool/*.c) -lpthread -ldl -lrt -lm -lgcc_s
	OMPTPY_TEST_TOOL=$(CURDIR)/$(SANITIZE_DIR)/libomptpy.so \
	OMPTPY_TEST_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	ASAN_OPTIONS=detect_leaks=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(BIN)/python -m pytest -q tests/tool/test_tool_c.py
	@# The Python-stack capture (csrc/ext/pystack.c, csrc/tool/stacks.c) runs only in
	@# Python: a copy of the package with both libraries sanitized runs the program of
	@# known lines (tests/programs/pystacks_app.py) with native frames on.
	rm -rf $(SANITIZE_PY) && mkdir -p $(SANITIZE_PY) && cp -r ompt_py $(SANITIZE_PY)/ \
	  && rm -f $(SANITIZE_PY)/ompt_py/*.so && cp $(SANITIZE_DIR)/libomptpy.so $(SANITIZE_PY)/ompt_py/
	gcc $(SANITIZE_CFLAGS) -Icsrc -Icsrc/include -I$(PY_INCLUDE) -shared \
	  -o $(SANITIZE_PY)/ompt_py/_core$(EXT_SUFFIX) $(wildcard csrc/ext/*.c) \
	  -L$(SANITIZE_PY)/ompt_py -l:libomptpy.so -Wl,-rpath,'$$ORIGIN'
	clang-19 -O2 -fopenmp -shared -fPIC -I$(PY_INCLUDE) tests/programs/ext/ompt_work_ext.c \
	  -o $(SANITIZE_PY)/ompt_work_ext$(EXT_SUFFIX)
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	OMPTPY_NATIVE_DEPTH=4 PYTHONPATH=$(SANITIZE_PY) \
	$(BIN)/python tests/programs/pystacks_app.py $(SANITIZE_PY)/trace.parquet on

lint: setup
	$(BIN)/ruff check ompt_py tests bench runtime setup.py

bench: setup
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/fallback.py
	$(BIN)/python bench/analysis.py
	$(BIN)/python bench/handlers.py
	$(BIN)/python bench/export.py
	$(BIN)/python bench/pystacks.py

setup: system-deps $(STAMP)

system-deps:
	@if ! command -v clang-19 >/dev/null || [ ! -e /usr/lib/llvm-19/lib/libomp.so.5 ]; then \
	  echo "Installing Debian packages: $(DEBIAN_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEBIAN_PACKAGES); \
	fi

# Never fails: a version that cannot be fetched is reported and its tests skip.
# apt-get download needs the package lists: without them (fresh container) it
# runs apt-get update once and tries again.
old-runtimes:
	@updated=; \
	for v in $(OLD_LIBOMP_VERSIONS); do \
	  dest=$(OLD_LIBOMP_DIR)/$$v; \
	  [ -e $$dest/libomp.so.5 ] && continue; \
	  echo "Fetching libomp $$v (Debian package libomp5-$$v) into $$dest"; \
	  tmp=$$(mktemp -d) || continue; \
	  ok=; \
	  for attempt in 1 2; do \
	    if (cd $$tmp && LC_ALL=C apt-get download -qq libomp5-$$v) >$$tmp/log 2>&1; then \
	      ok=1; break; \
	    fi; \
	    if [ -z "$$updated" ] && grep -Eq "Unable to locate|no candidate|Can't select|has no installation candidate" $$tmp/log; then \
	      echo "Package lists lack libomp5-$$v: running apt-get update"; \
	      updated=1; \
	      $(SUDO) apt-get update -qq >/dev/null 2>&1 || true; \
	    else \
	      break; \
	    fi; \
	  done; \
	  if [ -n "$$ok" ] && dpkg -x $$tmp/libomp5-$${v}_*.deb $$tmp/root \
	     && [ -e $$tmp/root/usr/lib/llvm-$$v/lib/libomp.so.5 ]; then \
	    rm -rf $$dest $$dest.part && mkdir -p $$dest.part \
	    && cp -a $$tmp/root/usr/lib/llvm-$$v/lib/. $$dest.part/ \
	    && mv $$dest.part $$dest || rm -rf $$dest.part; \
	  fi; \
	  if [ ! -e $$dest/libomp.so.5 ]; then \
	    sed 's/^/  /' $$tmp/log 2>/dev/null | grep -v '^  W: Download is performed unsandboxed' || true; \
	    echo "Could not fetch libomp $$v: the libomp $$v tests of tests/tool/test_versions.py will be skipped"; \
	  fi; \
	  rm -rf $$tmp; \
	done; true

$(STAMP): $(SOURCES)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

clean:
	rm -rf build examples/build bench/build ompt_py/*.so *.egg-info
