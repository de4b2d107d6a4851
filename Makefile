# make demo: set everything up, profile the bundled example, print the report.
# make test: set everything up, run the whole test suite (and the linter).
# Set-up: Debian packages clang-19 and libomp-19-dev, libotf2-trace-dev (libotf2
# and its headers: the OTF2 export's _otf2 extension), otf2-tools (otf2-print,
# which tests/io/test_otf2.py reads the archives with), chromium and
# chromium-driver (tests/presentation/test_view.py opens the interactive view in
# headless Chromium), and Open MPI and gfortran (openmpi-bin, libopenmpi-dev,
# gfortran: ompt-py run --mpi, mpi4py and the MPI tests, a Fortran one among
# them) (apt-get, as root or via sudo, those missing), a virtual environment in
# .venv, ompt-py installed into it (and checked to have its _otf2 extension).
# make old-runtimes (part of make test): libomp 14 and 16 unpacked into
# .cache/libomp/N for tests/tool/test_versions.py (they conflict with libomp5-19, so
# they are never installed); without them those tests are skipped.
# make test-old-libomp (part of make test): the host-side tests (marked
# any_libomp) once more, every traced process on libomp $(OLD_TEST_LIBOMP)
# (OMPTPY_TEST_LIBOMP, see tests/conftest.py).  Only 16 passes whole: libomp
# 14 has no dispatch events, which several of those tests count.
# make test-pythons (part of make test): the tests marked `pythons` (a smoke
# subset: recording from Python, the tool under a C program, tables, Parquet/CSV/
# Perfetto, the report) on every other supported Python, $(PYTHONS) (or
# PYTHONS=...); .venv's 3.11 runs them all.  Each version gets a venv in
# $(PYTHONS_DIR)/V with a regular (non-editable) install: pip builds that
# version's wheel (libomptpy.so, _core, bundled runtime, headers) into its
# site-packages, so they test what a wheel ships too.  Not in-place builds side by
# side: ompt_py/ holds .venv's editable build, whose libomptpy.so, include/ and
# runtime/ each version's in-place build would overwrite (truncating a library a
# running .venv process maps).  So the source tree's ompt_py must not be imported:
# pytest runs in the venv's folder (python -m and the tests' python -c children
# put the working directory first on sys.path), with OMPTPY_TEST_INSTALLED=1, for
# which tests/conftest.py refuses an ompt_py from the tree.  ompt-py's dependencies
# and pytest are installed when pyproject.toml changes, ompt-py itself when its
# sources do (build/*-cpython-3X, where pip builds, is emptied first: setuptools
# does not rebuild _core for a changed header).  The interpreter of version V:
# `pyenv prefix V`'s, $PYENV_ROOT/versions/V.*'s or pythonV on PATH; a version
# without one is reported and skipped, or fails with OMPTPY_REQUIRE_PYTHONS=1.
# make fuzz (not part of make test): coverage-guided fuzzing of the trace readers
# (tests/fuzz/fuzz_loaders.py, atheris: the pyproject's fuzz extra, installed into
# .venv here), each target for $(FUZZ_SECONDS) s (the load target, which runs the
# summary and the report on each input, twice that): the raw reader, the Parquet
# reader, and load + to_pandas + summary + report.  Seeds: the committed corpus
# tests/fuzz/corpus/TARGET; the inputs found that reach new code go to
# build/fuzz/TARGET, a finding (any exception but TraceFileError) to
# build/fuzz/TARGET-crash-*, and the target fails.
# make test-sanitize (part of make test): tests/tool/test_tool_c.py,
# tests/tool/test_sanitized.py (deep nesting, thread churn, sampling) and the
# device tracing tests (the emulated runtime: tests/tool/test_device_*.py) and profile mode
# (tests/tool/test_profile_tool.py), the overflow policies and the in-place route's stalls
# (tests/tool/test_overflow.py, test_stalls.py) with the tool
# built with AddressSanitizer and UBSan (gcc, -O1 -g) into build/sanitize/ and
# their runtime preloaded into the traced programs (OMPTPY_TEST_TOOL and
# OMPTPY_TEST_PRELOAD, see tests/conftest.py); any error fails the program, and
# leaks are reported except libomp's own (tests/lsan.supp); then the Python-stack
# capture, in a sanitized copy of the package, on tests/programs/pystacks_app.py,
# and the extension's kernels in it: the thread states' intervals
# (tests/analysis/test_state_sweep.py), the pairing pass (test_pair_events.py) and
# the view's levels of detail (csrc/ext/lod.c: the lod tests of
# tests/presentation/test_view.py), the protobuf's packets and the OTF2 writer
# (csrc/otf2/: tests/io/test_perfetto_proto.py, test_otf2.py).
# make sanitize (not part of make test): test-sanitize, then
# tests/tool/test_sanitized.py with the tool built with ThreadSanitizer (clang-19,
# build/tsan/) and the programs linked with its runtime (OMPTPY_TEST_SANITIZER=
# thread); a race report fails the test; tests/tsan.supp says what is suppressed
# (libomp's own interceptor calls) and why.  libarcher (LLVM's OMPT tool that
# tells TSan about OpenMP's synchronisation) cannot be used: libomp takes one
# tool, the first of OMP_TOOL_LIBRARIES that accepts, and that is ompt-py.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ompt-py-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := clang-19 libomp-19-dev libotf2-trace-dev otf2-tools chromium \
  chromium-driver openmpi-bin libopenmpi-dev gfortran
OLD_LIBOMP_VERSIONS := 14 16
OLD_LIBOMP_DIR := .cache/libomp
OLD_TEST_LIBOMP ?= 16
SOURCES := setup.py pyproject.toml $(wildcard csrc/*/*.c csrc/*/*.h)
PYTHONS ?= 3.9 3.10 3.12 3.13
# The suite's modules spread over this many pytest-xdist workers (a module's tests
# stay on one worker: their module fixtures run once).  TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
PYTHONS_DIR := .cache/pythons
# What the `pythons` tests need besides ompt-py and its dependencies (Cython: the
# Python-stack tests build a prange ... nogil module on every version).
PYTHONS_TEST_DEPS := 'pytest>=7.4' 'pytest-xdist>=3.5' 'cython>=3.0'
PACKAGE_FILES := $(SOURCES) MANIFEST.in $(wildcard runtime/*.py ompt_py/*.py ompt_py/*/*.py) \
  ompt_py/_core.pyi ompt_py/py.typed ompt_py/presentation/view.js

FUZZ_SECONDS ?= 60
FUZZ_STAMP := $(VENV)/.fuzz-installed
FUZZ_DIR := build/fuzz

SANITIZE_DIR := build/sanitize
TSAN_DIR := build/tsan
SANITIZE_PY := $(SANITIZE_DIR)/py
PY_INCLUDE = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT_SUFFIX = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
SANITIZE_CFLAGS := -std=c11 -O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror \
  -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

.PHONY: demo test test-old-libomp test-pythons test-sanitize sanitize fuzz setup system-deps old-runtimes lint bench clean

demo: setup
	@mkdir -p examples/build
	clang-19 -O2 -g -fopenmp examples/demo.c -o examples/build/demo
	$(BIN)/ompt-py run -o examples/build/demo.parquet -- examples/build/demo
	$(BIN)/ompt-py report examples/build/demo.parquet

test: setup lint old-runtimes
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)
	@$(MAKE) --no-print-directory test-sanitize
	@$(MAKE) --no-print-directory test-old-libomp
	@$(MAKE) --no-print-directory test-pythons
	@echo "Every test ran on Python $$($(BIN)/python -c 'import platform; print(platform.python_version())')" \
	  "(.venv); the pythons tests $$(cat $(PYTHONS_DIR)/last-run)"

test-old-libomp: setup
	@lib=$(OLD_LIBOMP_DIR)/$(OLD_TEST_LIBOMP); \
	if [ -e $$lib/libomp.so.5 ]; then \
	  echo "Host-side tests on libomp $(OLD_TEST_LIBOMP): OMPTPY_TEST_LIBOMP=$$lib pytest -m any_libomp"; \
	  OMPTPY_TEST_LIBOMP=$$lib $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m any_libomp; \
	else \
	  echo "Skipping the host-side tests on libomp $(OLD_TEST_LIBOMP): $$lib/libomp.so.5 is missing" \
	       "(make old-runtimes fetches it)"; \
	fi

test-pythons: system-deps
	@mkdir -p $(PYTHONS_DIR); tested=; skipped=; failed=; \
	for v in $(PYTHONS); do \
	  py=; \
	  for c in "$$(pyenv prefix $$v 2>/dev/null)/bin/python$$v" \
	           "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$$v.*/bin/python$$v \
	           "$$(command -v python$$v)"; do \
	    if [ "$$("$$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = $$v ]; then \
	      py=$$c; break; \
	    fi; \
	  done; \
	  if [ -z "$$py" ]; then \
	    echo "No Python $$v interpreter (pyenv install $$v, or python$$v on PATH)"; \
	    if [ "$$OMPTPY_REQUIRE_PYTHONS" = 1 ]; then failed="$$failed $$v (no interpreter)"; else skipped="$$skipped $$v"; fi; \
	    continue; \
	  fi; \
	  dir=$(PYTHONS_DIR)/$$v; \
	  [ ! -e $$dir ] || $$dir/bin/python -c '' 2>/dev/null || rm -rf $$dir; \
	  full=$$($$py -c 'import platform; print(platform.python_version())'); \
	  echo "Python $$full ($$py): pytest -m pythons in $$dir"; \
	  if $(MAKE) -s --no-print-directory $$dir/.ompt-py-installed PYTHONS_INTERPRETER=$$py \
	     && (cd $$dir && OMPTPY_TEST_INSTALLED=1 bin/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) \
	         -m pythons $(CURDIR)/tests); then \
	    tested="$$tested $$full"; \
	  else \
	    failed="$$failed $$full"; \
	  fi; \
	done; \
	echo "ran on Python$${tested:- none}$${skipped:+; skipped (no interpreter):$$skipped}$${failed:+; failed:$$failed}" \
	  > $(PYTHONS_DIR)/last-run; \
	echo "The pythons tests $$(cat $(PYTHONS_DIR)/last-run)"; \
	[ -z "$$failed" ]

# A venv of Python $* with ompt-py installed (see test-pythons).
$(PYTHONS_DIR)/%/.ompt-py-installed: $(PACKAGE_FILES)
	@[ -x $(@D)/bin/python ] || $(or $(PYTHONS_INTERPRETER),python$*) -m venv $(@D)
	rm -rf build/*-cpython-$(subst .,,$*)
	@if [ ! -e $(@D)/.deps-installed ] || [ pyproject.toml -nt $(@D)/.deps-installed ] \
	     || [ Makefile -nt $(@D)/.deps-installed ]; then \
	  echo "$(@D)/bin/python -m pip install -q . $(PYTHONS_TEST_DEPS)"; \
	  $(@D)/bin/python -m pip install -q --upgrade pip \
	  && $(@D)/bin/python -m pip install -q . $(PYTHONS_TEST_DEPS) \
	  && touch $(@D)/.deps-installed; \
	else \
	  echo "$(@D)/bin/python -m pip install -q --no-deps ."; \
	  $(@D)/bin/python -m pip install -q --no-deps .; \
	fi
	@touch $@

test-sanitize: setup
	@mkdir -p $(SANITIZE_DIR)
	gcc $(SANITIZE_CFLAGS) -Icsrc/include -shared -Wl,-soname,libomptpy.so -Wl,-z,defs \
	  -o $(SANITIZE_DIR)/libomptpy.so $(wildcard csrc/tool/*.c) -lpthread -ldl -lrt -lm -lgcc_s
	OMPTPY_TEST_TOOL=$(CURDIR)/$(SANITIZE_DIR)/libomptpy.so \
	OMPTPY_TEST_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	ASAN_OPTIONS=detect_leaks=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(BIN)/python -m pytest -q tests/tool/test_tool_c.py tests/tool/test_sanitized.py \
	  tests/tool/test_device_trace.py tests/tool/test_device_pool.py \
	  tests/tool/test_profile_tool.py tests/tool/test_overflow.py tests/tool/test_stalls.py
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
	gcc $(SANITIZE_CFLAGS) -I$(PY_INCLUDE) $$(otf2-config --cppflags) -shared \
	  -o $(SANITIZE_PY)/ompt_py/_otf2$(EXT_SUFFIX) $(wildcard csrc/otf2/*.c) \
	  $$(otf2-config --ldflags) -lotf2
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	OMPTPY_NATIVE_DEPTH=4 PYTHONPATH=$(SANITIZE_PY) \
	$(BIN)/python tests/programs/pystacks_app.py $(SANITIZE_PY)/trace.parquet on
	@# The extension's kernels in the same copy: the thread states' intervals and the
	@# exports' threads-waiting counter (states.c), the records' counts and rows per event
	@# and their threads (columns.c), the
	@# pairing pass (pairing.c), the records' time order (order.c), the view's levels of
	@# detail (lod.c), the Perfetto protobuf's packets (proto.c), and the OTF2 writer (csrc/otf2/:
	@# also a dataset's archive joined from its parts; not the Dask tests: their workers die
	@# under ASan, whatever the format) (PYTHONSAFEPATH: not the source
	@# tree's package, which the current directory would put first).
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PYTHONSAFEPATH=1 PYTHONPATH=$(SANITIZE_PY) \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/analysis/test_state_sweep.py \
	  tests/analysis/test_pair_events.py tests/presentation/test_view.py \
	  tests/io/test_perfetto_proto.py tests/io/test_otf2.py tests/test_time_order.py \
	  tests/io/test_export.py tests/test_records.py tests/io/test_dataset_exports.py \
	  -k "(state_sweep or pair_events or lod or aggregates or blobs or large_trace or proto or otf2 \
	      or time_order or waiting or event_counts or event_groups or census) \
	      and not with_dask"

sanitize: test-sanitize
	@mkdir -p $(TSAN_DIR)
	clang-19 -std=c11 -O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -fsanitize=thread \
	  -Icsrc/include -shared -Wl,-soname,libomptpy.so -o $(TSAN_DIR)/libomptpy.so \
	  $(wildcard csrc/tool/*.c) -lpthread -ldl -lrt -lm
	OMPTPY_TEST_SANITIZER=thread OMPTPY_TEST_TOOL=$(CURDIR)/$(TSAN_DIR)/libomptpy.so \
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=0" \
	$(BIN)/python -m pytest -q tests/tool/test_sanitized.py

fuzz: setup $(FUZZ_STAMP)
	@mkdir -p $(FUZZ_DIR)
	@for target in raw parquet load; do \
	  seconds=$(FUZZ_SECONDS); [ $$target != load ] || seconds=$$((2 * $(FUZZ_SECONDS))); \
	  mkdir -p $(FUZZ_DIR)/$$target; \
	  echo "Fuzzing $$target for $$seconds s (new inputs: $(FUZZ_DIR)/$$target)"; \
	  $(BIN)/python tests/fuzz/fuzz_loaders.py $$target -max_total_time=$$seconds -timeout=60 \
	    -artifact_prefix=$(FUZZ_DIR)/$$target- -print_final_stats=1 \
	    $(FUZZ_DIR)/$$target tests/fuzz/corpus/$$target 2>&1 \
	    | grep -vE '^INFO: Instrumenting|^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED)'; \
	  found=$$(ls $(FUZZ_DIR)/$$target-crash-* $(FUZZ_DIR)/$$target-timeout-* \
	           $(FUZZ_DIR)/$$target-oom-* 2>/dev/null); \
	  [ -z "$$found" ] || { echo "fuzz: findings (remove them once fixed): $$found"; exit 1; }; \
	done

$(FUZZ_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,fuzz]'
	@touch $@

lint: setup
	$(BIN)/ruff check ompt_py tests bench runtime notebooks setup.py

bench: setup
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/file_route.py
	$(BIN)/python bench/fallback.py
	$(BIN)/python bench/analysis.py
	$(BIN)/python bench/handlers.py
	$(BIN)/python bench/export.py
	$(BIN)/python bench/view.py
	$(BIN)/python bench/pystacks.py
	$(BIN)/python bench/device_trace.py
	$(BIN)/python bench/offload_tables.py
	$(BIN)/python bench/merge_memory.py
	$(BIN)/python bench/apps.py
	$(BIN)/python bench/clock_align.py
	$(BIN)/python bench/dataset.py
	$(BIN)/python bench/load_memory.py

setup: system-deps $(STAMP)

system-deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
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
	@$(BIN)/python -c 'import ompt_py._otf2' 2>/dev/null || { echo "ompt_py._otf2 was not" \
	  "built: is libotf2-trace-dev installed? (setup.py leaves it out without libotf2)"; exit 1; }
	@touch $(STAMP)

clean:
	rm -rf build examples/build bench/build ompt_py/*.so *.egg-info
