"""runtime/bundle.py: which libomp the build puts into the package (setup.py
calls bundle(); the wheel test in test_fallback.py checks the result)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import LIBOMP, REPO

sys.path.insert(0, str(REPO))
from runtime.bundle import LICENSE_NAME, SONAME, BundleError, bundle


@pytest.fixture
def env(monkeypatch):
    for name in ("OMPTPY_BUNDLE_RUNTIME", "OMPTPY_LIBOMP", "OMPTPY_LLVM_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_switched_off_bundles_nothing(env, tmp_path):
    env.setenv("OMPTPY_BUNDLE_RUNTIME", "0")
    assert bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None) is None
    assert not (tmp_path / "rt").exists()


@pytest.mark.skipif(LIBOMP is None, reason="no LLVM libomp installed")
def test_explicit_library_is_copied_with_its_license(env, tmp_path):
    env.setenv("OMPTPY_LIBOMP", str(LIBOMP))
    dest = bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None)
    assert dest == str(tmp_path / "rt" / SONAME)
    assert (tmp_path / "rt" / SONAME).read_bytes() == LIBOMP.read_bytes()
    license_text = (tmp_path / "rt" / LICENSE_NAME).read_text()
    assert "Apache" in license_text and "LLVM" in license_text


@pytest.mark.skipif(LIBOMP is None, reason="no LLVM libomp installed")
def test_default_is_the_installed_libomp(env, tmp_path):
    dest = bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None)
    assert dest is not None and (tmp_path / "rt" / SONAME).stat().st_size > 100_000


def test_missing_explicit_library_is_an_error(env, tmp_path):
    env.setenv("OMPTPY_LIBOMP", str(tmp_path / "nope.so"))
    with pytest.raises(BundleError, match="not a file"):
        bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None)


def test_library_without_ompt_is_refused(env, tmp_path):
    lib = tmp_path / "libnotomp.so"
    src = tmp_path / "x.c"
    src.write_text("int omp_get_max_threads(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    env.setenv("OMPTPY_LIBOMP", str(lib))
    with pytest.raises(BundleError, match="without OMPT"):
        bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None)
    assert not (tmp_path / "rt" / SONAME).exists()


def test_source_tree_without_openmp_is_an_error(env, tmp_path):
    env.setenv("OMPTPY_LLVM_SOURCE", str(tmp_path))
    with pytest.raises(BundleError, match="no LLVM OpenMP sources"):
        bundle(str(tmp_path / "rt"), str(tmp_path), log=lambda m: None)
