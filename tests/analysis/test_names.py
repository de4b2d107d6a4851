"""Readable function names (ompt_py/analysis/names.py, the name column of
Trace.symbolize): Cython's C names read back to Python names, C++ names
shortened.  On names as symbolizers give them, and on real binaries: the
scikit-learn wheel of the test dependencies and the system's libstdc++.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ompt_py.analysis import names, summary, symbols
from ompt_py.elf import symbol_names

LLOYD = "7sklearn_7cluster_14_k_means_lloyd_"
LLOYD_FLAG = "__pyx_module_is_main_sklearn__cluster___k_means_lloyd"  # names the module
MOD_X = "3pkg_3sub_5mod_x_"  # a module pkg/sub/mod_x.pyx compiled by Cython 3.3

# (C name as a symbolizer gives it, the module's symbols, its Python name)
CYTHON = [
    # the Python wrapper of a def function, and of its fused specializations
    (f"__pyx_pw_{LLOYD}1lloyd_iter_chunked_dense", [LLOYD_FLAG],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense"),
    (f"__pyx_fuse_1__pyx_pw_{LLOYD}7lloyd_iter_chunked_dense", [LLOYD_FLAG],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 1]"),
    # a cdef function: no number, a single reading
    (f"__pyx_f_{LLOYD}_update_chunk_dense", [],
     "sklearn.cluster._k_means_lloyd._update_chunk_dense"),
    ("__pyx_fuse_0__pyx_f_7sklearn_7cluster_15_k_means_common__inertia_dense._omp_fn.0", [],
     "sklearn.cluster._k_means_common._inertia_dense [fused 0] [clone ._omp_fn.0]"),
    # OpenMP regions outlined by gcc and clang
    (f"__pyx_pf_{LLOYD}4lloyd_iter_chunked_dense._omp_fn.0", [LLOYD_FLAG],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [clone ._omp_fn.0]"),
    (f"__pyx_pf_{LLOYD}4lloyd_iter_chunked_dense.omp_outlined", [LLOYD_FLAG],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [clone .omp_outlined]"),
    (f"__pyx_pf_{LLOYD}4lloyd_iter_chunked_dense.omp_outlined_debug__", [LLOYD_FLAG],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [clone .omp_outlined_debug__]"),
    # "10lloyd_iter_..." may be a class "lloyd_iter": the function's wrapper tells
    (f"__pyx_pf_{LLOYD}10lloyd_iter_chunked_sparse._omp_fn.0",
     [LLOYD_FLAG, f"__pyx_fuse_0__pyx_pw_{LLOYD}11lloyd_iter_chunked_sparse"],
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_sparse [clone ._omp_fn.0]"),
    # the wrapper of a fused cpdef function has the specialization inside
    ("__pyx_pw_7sklearn_5utils_12_cython_blas_23__pyx_fuse_0_dot_memview",
     ["__pyx_module_is_main_sklearn__utils___cython_blas"],
     "sklearn.utils._cython_blas._dot_memview [fused 0]"),
    # a module compiled as C++: static functions, demangled with their parameter types
    ("__pyx_f_7sklearn_7metrics_29_pairwise_distances_reduction_8_argkmin_9ArgKmin64"
     "__parallel_on_X_init_chunk(__pyx_obj_7sklearn_7metrics_29_pairwise_distances_"
     "reduction_8_argkmin_ArgKmin64*, long, long, long)", [],
     "sklearn.metrics._pairwise_distances_reduction._argkmin.ArgKmin64._parallel_on_X_init_chunk"),
    ("__pyx_fuse_0_3__pyx_pw_7sklearn_13preprocessing_20_target_encoder_fast_29"
     "_fit_encoding_fast_auto_smooth(_object*, _object*, _object*) [clone .cold]",
     ["__pyx_module_is_main_sklearn__preprocessing___target_encoder_fast"],
     "sklearn.preprocessing._target_encoder_fast._fit_encoding_fast_auto_smooth [fused 0_3] "
     "[clone .cold]"),
    ("__pyx_fuse_0_3__pyx_pw_7sklearn_13preprocessing_20_target_encoder_fast_29"
     "_fit_encoding_fast_auto_smooth(_object*, _object*, _object*) (.cold)",
     ["__pyx_module_is_main_sklearn__preprocessing___target_encoder_fast"],
     "sklearn.preprocessing._target_encoder_fast._fit_encoding_fast_auto_smooth [fused 0_3] "
     "[clone .cold]"),
    ("_ZL54__pyx_tp_new_7sklearn_5utils_10_fast_dict_IntFloatDictP11_typeobjectP7_objectS2_",
     [], None),
    # methods: of a cdef class (its type object names it), of a Python class (the other
    # C function of the method reads the same), a cdef method, a closure
    (f"__pyx_pw_{MOD_X}6Kernel_5run",
     ["__pyx_module_is_main_pkg__sub__mod_x", f"__pyx_type_{MOD_X}Kernel"],
     "pkg.sub.mod_x.Kernel.run"),
    (f"__pyx_pf_{MOD_X}6Kernel___init__",
     ["__pyx_module_is_main_pkg__sub__mod_x", f"__pyx_pw_{MOD_X}6Kernel_1__init__"],
     "pkg.sub.mod_x.Kernel.__init__"),
    (f"__pyx_pf_{MOD_X}5Plain_meth",
     ["__pyx_module_is_main_pkg__sub__mod_x", f"__pyx_pw_{MOD_X}5Plain_1meth"],
     "pkg.sub.mod_x.Plain.meth"),
    (f"__pyx_f_{MOD_X}6Kernel_apply", [], "pkg.sub.mod_x.Kernel.apply"),
    (f"__pyx_pf_{MOD_X}5outer_inner",
     ["__pyx_module_is_main_pkg__sub__mod_x", f"__pyx_pw_{MOD_X}5outer_1inner"],
     "pkg.sub.mod_x.outer.inner"),
    # names with non-ASCII characters: punycoded whole
    (f"__pyx_Upw_{MOD_X}12ame_e8c", ["__pyx_module_is_main_pkg__sub__mod_x"],
     "pkg.sub.mod_x.ñame"),
    (f"__pyx_Uf_{MOD_X}func_pld", [], "pkg.sub.mod_x.ćfunc"),
    # ambiguous without the module's symbols: left as they are
    (f"__pyx_pw_{LLOYD}1lloyd_iter_chunked_dense", [], None),  # "7cluster_..." a function?
    (f"__pyx_pf_{LLOYD}10lloyd_iter_chunked_sparse._omp_fn.0", [LLOYD_FLAG], None),
    (f"__pyx_pw_{MOD_X}6Kernel_5run", ["__pyx_module_is_main_pkg__sub__mod_x"], None),
    (f"__pyx_pw_{MOD_X}5outer_5__pyx_lambda_funcdef_lambda1",
     ["__pyx_module_is_main_pkg__sub__mod_x"], None),
    # not a Cython function, or not one these names say enough about
    ("__pyx_gb_7sklearn_8datasets_21_svmlight_format_fast_19_dump_svmlight_file_11generator3",
     [], None),
    ("__pyx_pw___pyx_memoryview_1__reduce_cython__", [], None),
    ("__pyx_pymod_exec__k_means_lloyd", [], None),
    ("__Pyx_AddTraceback.isra.0", [], None),
    ("main", [], None),
    ("", [], None),
]


@pytest.mark.parametrize(("function", "context", "expected"), CYTHON)
def test_cython_names(function, context, expected):
    assert names.CythonNames(context).python_name(function) == expected
    assert names.readable(function, names.CythonNames(context)) == (
        expected or names.short(function))


def test_cython_modules_given_by_name():
    """Without the binary, the dotted module name separates module from function."""
    pw = f"__pyx_fuse_0__pyx_pw_{LLOYD}5lloyd_iter_chunked_dense"
    assert names.CythonNames().python_name(pw) is None  # "7cluster_..." might be a function
    assert names.CythonNames(modules=["sklearn.cluster._k_means_lloyd"]).python_name(pw) == \
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 0]"


# (demangled name, shortened): by GNU's and LLVM's demanglers
CXX = [
    ("at::TensorIteratorBase::for_each(c10::function_ref<void (char**, long const*, long, "
     "long)>, long)", "at::TensorIteratorBase::for_each(…)"),
    ("dnnl::impl::parallel(int, std::function<void (int, int)> const&)",
     "dnnl::impl::parallel(…)"),
    ("std::vector<int, std::allocator<int> >::push_back(int const&)",
     "std::vector<…>::push_back(…)"),
    ("std::vector<int, std::allocator<int>>::push_back(int const&)",
     "std::vector<…>::push_back(…)"),
    ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int>(__gnu_cxx::"
     "__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int&&)",
     "std::vector<…>::_M_realloc_insert<…>(…)"),
    ("double ns::work<double>(std::vector<double, std::allocator<double> >&) "
     "[clone ._omp_fn.0]", "ns::work<…>(…) [clone ._omp_fn.0]"),
    ("double ns::work<double>(std::vector<double, std::allocator<double>>&) (.omp_outlined)",
     "ns::work<…>(…) [clone .omp_outlined]"),
    ("std::_Function_handler<long (long, long), ns::work<double>(std::vector<double, "
     "std::allocator<double> >&)::{lambda(long, long)#1}>::_M_invoke(std::_Any_data const&, "
     "long&&, long&&)", "std::_Function_handler<…>::_M_invoke(…)"),
    ("ns::work<double>(std::vector<double>&)::{lambda(long, long)#1}::operator()(long, long) "
     "const", "ns::work<…>(…)::{lambda(…)#1}::operator()(…)"),
    ("double ns::work<double>(std::vector<double>&)::'lambda'(long, long)::operator()(long, "
     "long) const", "ns::work<…>(…)::'lambda'(…)::operator()(…)"),
    ("at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar "
     "const&)::{lambda()#1}::operator()() const",
     "at::native::(anonymous namespace)::add_kernel(…)::{lambda()#1}::operator()()"),
    ("bool ns::Box<int>::operator<(ns::Box<int> const&) const", "ns::Box<…>::operator<(…)"),
    ("std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
     "std::operator<< <…>(…)"),
    ("ns::Box<int>::operator->()", "ns::Box<…>::operator->()"),
    ("a::b::operator>>=(int)", "a::b::operator>>=(…)"),
    ("std::map<int, int, std::less<int>, std::allocator<std::pair<int const, int> > >::"
     "operator[](int const&)", "std::map<…>::operator[](…)"),
    ("Foo::operator unsigned long() const", "Foo::operator unsigned long()"),
    ("operator delete[](void*)", "operator delete[](…)"),
    ("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::"
     "_M_create[abi:cxx11](unsigned long&, unsigned long)",
     "std::__cxx11::basic_string<…>::_M_create(…)"),
    ("foo(int) [clone .cold]", "foo(…) [clone .cold]"),
    ("a<b>::c() const &", "a<…>::c()"),
    ("x<(anonymous namespace)::Y>::z()", "x<…>::z()"),
    ("core::ptr::drop_in_place<alloc::vec::Vec<u8>>", "core::ptr::drop_in_place<…>"),
    # left as they are: nothing to shorten, or brackets that do not balance
    ("main", "main"),
    ("foo._omp_fn.0", "foo._omp_fn.0"),
    ("sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 1]",
     "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 1]"),
    *((name, name) for name in [
        "void (*std::signal(int, void (*)(int)))(int)",
        "std::enable_if<(3)>(2), void>::type f<3>()",
        "f(", "f(]", "a::b<c>>", "<<<", "}{", "{lambda", ""]),
]


@pytest.mark.parametrize(("name", "expected"), CXX)
def test_short(name, expected):
    assert names.short(name) == expected
    assert names.short(expected) == expected
    assert names.readable(name) == expected


def test_names_never_raise():
    """Random and unbalanced names come back as strings, shortening again changes
    nothing, and very long ones come back too."""
    pieces = ["operator", "operator<", "<", ">", "(", ")", "[", "]", "{lambda(", ")#1}", "{", "}",
              "[abi:cxx11]", "[clone .cold]", " const", "::", "(anonymous namespace)", "__pyx_",
              "pw_", "pf_", "f_", "__pyx_fuse_0", "__pyx_U", "7sklearn_", "_ZL", "12", "->", " ",
              ".", "_omp_fn.0", "lambda", "a", "ñ", "1a_", "#", "'", "*", "&", ","]
    reader = names.CythonNames(["__pyx_module_is_main_sklearn", "__pyx_type_7sklearn_a"])
    rng = random.Random(0)
    for _ in range(20000):
        name = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        shortened = names.short(name)
        assert isinstance(shortened, str) and names.short(shortened) == shortened
        assert isinstance(names.readable(name, reader), str)
    for name in ["{" * 5000 + "}" * 5000, "<" * 20000, "a<b>" * 20000 + "(int)",
                 "__pyx_pw_" + "1a_" * 5000 + "5name", "__pyx_f_" + "9" * 5000 + "x"]:
        assert isinstance(names.readable(name, reader), str)


# ---- real binaries -----------------------------------------------------------------------------


def _sklearn_module(package: str, name: str) -> Path:
    """The extension module NAME of the installed scikit-learn's PACKAGE (found without
    importing scikit-learn, which would load its OpenMP runtime into pytest)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-learn is not installed (pip install -e '.[test]')")
    found = sorted(Path(spec.submodule_search_locations[0], package).glob(f"{name}.*.so"))
    if not found:
        pytest.skip(f"scikit-learn {spec.origin} has no {package}/{name}.*.so")
    return found[0]


def _nm(path: Path, *options: str) -> list[tuple[int, str, str]]:
    """(address, type, name) of the symbols nm (binutils) lists for a binary."""
    out = subprocess.run(["nm", *options, str(path)], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    return [(int(r[0], 16), r[1], r[2].split("@")[0]) for r in rows if len(r) == 3]


KMEANS = {
    ("cluster", "_k_means_lloyd"): {
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 0]",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 1]",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [clone ._omp_fn.0]",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_sparse",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_sparse [fused 0]",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_sparse [fused 1]",
        "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_sparse [clone ._omp_fn.0]",
    },
    ("cluster", "_k_means_common"): {
        "sklearn.cluster._k_means_common._inertia_dense [fused 0] [clone ._omp_fn.0]",
        "sklearn.cluster._k_means_common._inertia_dense [fused 1] [clone ._omp_fn.0]",
        "sklearn.cluster._k_means_common._relocate_empty_clusters_dense [fused 1]",
        "sklearn.cluster._k_means_common._average_centers [fused 0]",
    },
}


@pytest.mark.parametrize(("package", "module"), list(KMEANS))
def test_cython_names_of_the_scikit_learn_wheel(package, module):
    """KMeans's Cython functions, by the symbols of the wheel's modules: the ones of
    its OpenMP regions among them, and none read as another module's."""
    path = _sklearn_module(package, module)
    listed = _nm(path, "-a")
    assert set(symbol_names(str(path))) >= {name for _, _, name in listed}
    reader = names.CythonNames(name for _, _, name in listed)
    functions = [name for _, kind, name in listed if kind in "tT"]
    read = {reader.python_name(f) for f in functions}
    assert KMEANS[package, module] <= read
    assert all(n is None or n.startswith(f"sklearn.{package}.{module}.") for n in read)


def test_symbolize_the_scikit_learn_wheel():
    """resolve(): the symbolizer's function, its name and the location made of it,
    for code addresses in _k_means_lloyd's functions (as if it were loaded at base)."""
    path = _sklearn_module("cluster", "_k_means_lloyd")
    base = 0x7F0000000000
    at = {name: addr for addr, kind, name in _nm(path) if kind in "tT"}
    wanted = {f"__pyx_fuse_1__pyx_pw_{LLOYD}7lloyd_iter_chunked_dense":
              "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense [fused 1]"}
    wanted.update({f: "sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_"
                      f"{'dense' if 'dense' in f else 'sparse'} [clone ._omp_fn.0]"
                   for f in at if f.endswith("._omp_fn.0")})
    wanted = {f: n for f, n in wanted.items() if f in at}
    assert len(wanted) >= 3, sorted(at)
    modules = symbols.Modules([{"path": str(path), "start": base, "end": base + (1 << 28),
                                "base": base}])
    found = symbols.resolve(modules, np.array([base + at[f] + 1 for f in wanted], np.uint64))
    got = {(r.function, r.name, r.location) for r in found.itertuples()}
    assert got == {(f, n, f"{n} ({path.name})") for f, n in wanted.items()}


LIBSTDCXX = {  # symbols of libstdc++'s ABI since GCC 5 and their names shortened
    "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE":
        "std::thread::_M_start_thread(…)",
    "_ZNSt13basic_filebufIcSt11char_traitsIcEE4openEPKcSt13_Ios_Openmode":
        "std::basic_filebuf<…>::open(…)",
    "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7compareEPKc":
        "std::__cxx11::basic_string<…>::compare(…)",
    "_ZStlsISt11char_traitsIcEERSt13basic_ostreamIcT_ES5_PKc": "std::operator<<<…>(…)",
}


def _libstdcxx() -> Path:
    """The system's libstdc++.so.6."""
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                   "/usr/lib"):
        if Path(folder, "libstdc++.so.6").exists():
            return Path(folder, "libstdc++.so.6")
    pytest.skip("no libstdc++.so.6 in the usual library folders")


def test_cxx_names_of_libstdcxx():
    """Real C++ symbols: demangled by the symbolizer (resolve) and by c++filt or
    llvm-cxxfilt (demangle), shortened the same."""
    path = _libstdcxx()
    at = {name: addr for addr, kind, name in _nm(path, "-D", "--defined-only")}
    base = 0x7F0000000000
    modules = symbols.Modules([{"path": str(path), "start": base, "end": base + (1 << 28),
                                "base": base}])
    found = symbols.resolve(modules, np.array([base + at[s] + 1 for s in LIBSTDCXX], np.uint64))
    by_symbolizer = dict(zip(found["function"], found["name"]))
    demangled = symbols.demangle(LIBSTDCXX)
    assert set(demangled) == set(LIBSTDCXX)
    for symbol, expected in LIBSTDCXX.items():
        for name in (by_symbolizer.get(demangled[symbol]), names.short(demangled[symbol])):
            assert name is not None and name.replace("<< <", "<<<") == expected, (symbol, name)


def test_raw_cxx_names_are_demangled(monkeypatch):
    """A symbolizer that does not demangle: resolve() demangles its _Z names (one
    c++filt run for all), and reads the Cython ones a C++ compiler mangled."""
    raw = [*LIBSTDCXX, "_ZL102__pyx_f_7sklearn_7metrics_29_pairwise_distances_reduction_8_argkmin"
           "_9ArgKmin32__parallel_on_Y_finalizeP79__pyx_obj_7sklearn_7metrics_29_pairwise_"
           "distances_reduction_8_argkmin_ArgKmin32._omp_fn.0", "main"]
    path = str(_libstdcxx())  # any file that exists, with no symbols of its own
    monkeypatch.setattr(symbols, "symbolize", lambda queries: (
        {q: (f, None, None) for q, f in zip(queries, raw)}, "a test symbolizer"))
    modules = symbols.Modules([{"path": path, "start": 0x1000, "end": 0x2000, "base": 0x1000}])
    found = symbols.resolve(modules, np.arange(0x1001, 0x1001 + len(raw), dtype=np.uint64))
    assert found["name"].str.replace("<< <", "<<<").tolist() == [
        *LIBSTDCXX.values(), "sklearn.metrics._pairwise_distances_reduction._argkmin.ArgKmin32."
        "_parallel_on_Y_finalize [clone ._omp_fn.0]", "main"]
    assert found["function"].iloc[0] == (
        "std::thread::_M_start_thread(std::unique_ptr<std::thread::_State, "
        "std::default_delete<std::thread::_State> >, void (*)())")
    assert (found["location"] == found["name"] + f" ({Path(path).name})").all()


def test_summary_tables_shorten_function_names():
    """Summary's display tables (summary.readable) show the function column shortened;
    the table itself keeps the full names."""
    full = CXX[0][0]
    table = pd.DataFrame({"function": [full, None, "main"], "total_ns": [1e6, 2e6, 3e6]})
    shown = summary.readable(table)
    assert shown["function"].iloc[[0, 2]].tolist() == [CXX[0][1], "main"]
    assert pd.isna(shown["function"].iloc[1])
    assert table["function"].iloc[0] == full
