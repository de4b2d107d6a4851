"""Function names a person can read: Cython's C names back to the Python names
they were compiled from, C++ names shortened for display.

The symbolizers give a native function's full name, which stays the data (the
``function`` column of Trace.symbolize).  Two kinds are hard to read in a table:

* the C names Cython gives what it compiles, e.g.
  ``__pyx_pw_7sklearn_7cluster_14_k_means_lloyd_7lloyd_iter_chunked_dense`` for
  ``sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense``: ``CythonNames``
  reads them back, by Cython's own rules (below);
* C++ names, every template argument and parameter type spelled out:
  ``short`` collapses those to ``<…>`` and ``(…)``, as profilers' compact views do.

``readable`` does whichever applies.  None of these raises: what they cannot
read with certainty is returned as it was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# ---- Cython -------------------------------------------------------------------------------------
# Cython's C names (Cython/Compiler: Naming.py, Symtab.Scope.mangle and next_id,
# Nodes.DefNode, PyrexTypes.get_fused_cname).  Every scope (package, module, class,
# function) adds len(name), name and "_" to the prefix of what is declared in it:
# sklearn.cluster._k_means_lloyd is "7sklearn_7cluster_14_k_means_lloyd_".  Then
#   __pyx_f_  + prefix + name        a cdef or cpdef function (the C function)
#   __pyx_pf_ + prefix + [n] + name  a def or cpdef function's body
#   __pyx_pw_ + prefix + [n] + name  its Python wrapper
# where n (Scope.next_id) numbers the bodies and wrappers of a scope from its second
# one on.  A specialization of a fused function is __pyx_fuse_<i> + its C name, i the
# position of its type in the fused type's declaration (i_j... for several fused
# types); a cpdef one's wrapper has it inside: __pyx_pw_ + prefix + n + __pyx_fuse_<i> +
# name.  A name with non-ASCII characters is punycoded whole, its "-" written "_" and
# its first "__pyx_" "__pyx_U".  Compiled as C++, a static function is _ZL<length><name>
# plus its parameter types.  Compilers append the outlined parts of a function to its
# name: ._omp_fn.N (gcc's OpenMP regions), .omp_outlined (clang's), .cold, .isra.0 ...
#
# A number after a scope is either n or the length of the next scope: "4tree_..." may
# be the package "tree" or the function "tree_..." numbered 4, "6Kernel_4run" Kernel.run
# or a function "Kernel_4run" numbered 6.  The binary's other symbols tell: the modules
# are named by their flag variables (__pyx_module_is_main_ + the dotted name, "." written
# "__"), cdef classes by their type objects (__pyx_type_ + module prefix + class name),
# and the body, wrapper and C function of one Python function read the same only under
# the right reading.  A name that stays ambiguous is not read.  Not read either:
# generator bodies (__pyx_gb_), whose names do not say which generator, and Cython's own
# utility code (View.MemoryView and the like).
_CYTHON = re.compile(r"(?:__pyx_fuse_(\d+(?:_\d+)*))?(__pyx_U?(?:pw|pf|f)_\w+)")
_KIND = re.compile(r"__pyx_(pw|pf|f)_(\w+)")
# a lambda's name: lambda, lambda1 ..., by Cython 3.3 its body's C name
_LAMBDA = re.compile(r"(?:__pyx_lambda_funcdef_\w*)?lambda\d*")
_FUSED_NAME = re.compile(r"__pyx_fuse_(\d+(?:_\d+)*)(\w+)")
_CPP_STATIC = re.compile(r"_ZL(\d{1,4})")
_NUMBER = re.compile(r"[1-9]\d{0,5}")
_LONGEST = 1000  # characters: longer names are not Cython's (and would take long to read)
_WORD = re.compile(r"\w*")
_MODULE_FLAG = "__pyx_module_is_main_"
_CLASS_SYMBOLS = ("__pyx_type_", "__pyx_tp_new_")


def _unpunycode(name: str) -> str | None:
    """A ``__pyx_U...`` name as Cython wrote it before punycoding, None if it is not one."""
    basic, _, extended = name[len("__pyx_U"):].rpartition("_")
    try:
        return ("__pyx_" + basic + "-" + extended).encode("ascii").decode("punycode")
    except (UnicodeError, ValueError, IndexError):  # not punycode after all
        return None


def _c_name(symbol: str) -> str:
    """A symbol's C name: a C++ static function's (_ZL<length><name><parameter types>)
    without its parameter types, but with a suffix (.cold, ._omp_fn.0) it has."""
    m = _CPP_STATIC.match(symbol)
    if m is None:
        return symbol
    end = m.end() + int(m.group(1))
    dot = symbol.find(".", end)
    return symbol[m.end():end] + (symbol[dot:] if dot >= 0 else "")


def _split(symbol: str) -> tuple[str | None, str, str, str]:
    """(fused index, kind, mangled part after the kind, what follows the C name) of a
    Cython function's name; kind "" if it is not one."""
    symbol = _c_name(symbol)
    base = _WORD.match(symbol).group()
    rest = symbol[len(base):]
    m = _CYTHON.fullmatch(base)
    if m is None:
        return None, "", "", rest
    fused, mangled = m.groups()
    if mangled.startswith("__pyx_U"):
        mangled = _unpunycode(mangled) or ""
    k = _KIND.fullmatch(mangled)
    return (fused, k.group(1), k.group(2), rest) if k else (None, "", "", rest)


def _readings(kind: str, mangled: str) -> list[tuple[str, ...]]:
    """Every way to read ``mangled`` as scopes, [n], name: each as (scope, ..., name).
    A wrapper's n is never missing (its body took the number before it) unless it
    wraps a lambda, whose body is named apart (__pyx_lambda_funcdef_lambda)."""
    out: list[tuple[str, ...]] = []
    scopes: list[str] = []
    pos = 0
    while len(mangled) <= _LONGEST:
        if scopes and (kind != "pw" or _LAMBDA.fullmatch(mangled, pos)) and \
                mangled[pos:].isidentifier():
            out.append((*scopes, mangled[pos:]))
        number = _NUMBER.match(mangled, pos)
        if number is None:
            return out
        end = number.end()
        if kind != "f" and scopes and mangled[end:].isidentifier():
            out.append((*scopes, mangled[end:]))
        length = int(number.group())
        scope = mangled[end:end + length]
        if len(scope) != length or not scope.isidentifier() or \
                mangled[end + length:end + length + 1] != "_":
            return out
        scopes.append(scope)
        pos = end + length + 1
    return out


class CythonNames:
    """Reads Cython's C function names back to Python-level dotted names.

    A name that can be read in one way only is read so.  Another one needs the
    symbol names of the binary it is in (``symbols``, e.g. elf.symbol_names),
    which name its Cython modules and the other C functions of each Python
    function, or the dotted names of its Cython modules (``modules``).
    """

    def __init__(self, symbols: Iterable[str] = (), modules: Iterable[str] = ()) -> None:
        symbols = [_c_name(s) for s in symbols if "__pyx_" in s]
        # each module's flag variable: "__pyx_module_is_main_" + its name, "." written "__"
        self._modules = {m.replace(".", "__") for m in modules} | {
            s[len(_MODULE_FLAG):] for s in symbols if s.startswith(_MODULE_FLAG)}
        # cdef classes: their type object and tp_new, named by module prefix + class name
        self._classes = {s[len(p):] for s in symbols for p in _CLASS_SYMBOLS if s.startswith(p)}
        self._mangled: dict[tuple[str, ...], set[str]] = {}
        for symbol in symbols:
            _, kind, mangled, _ = _split(symbol)
            for reading in _readings(kind, mangled):
                self._mangled.setdefault(reading, set()).add(mangled)

    def _module_length(self, reading: tuple[str, ...]) -> int:
        """How many of a reading's scopes name one of the modules (packages and module),
        0 if none do."""
        joined = ""
        for k, scope in enumerate(reading[:-1], 1):
            joined = f"{joined}__{scope}" if joined else scope
            if joined in self._modules:
                return k
        return 0

    def _evident(self, reading: tuple[str, ...], mangled: str) -> bool:
        """Whether another symbol (of the same Python function) reads the same, or the
        reading's one scope after its module is a cdef class of that module."""
        if self._mangled.get(reading, set()) - {mangled}:
            return True
        k = self._module_length(reading)
        prefix = "".join(f"{len(scope)}{scope}_" for scope in reading[:k])
        return k > 0 and len(reading) == k + 2 and prefix + reading[k] in self._classes

    def python_name(self, function: str) -> str | None:
        """``module.Class.function`` for a Cython function's C name (as a symbolizer
        gives it, demangled or not), with `` [fused i]`` for a specialization of a
        fused function and `` [clone .suffix]`` for an outlined part; None if
        ``function`` is not one or cannot be read with certainty."""
        fused, kind, mangled, rest = _split(function)
        readings = set(_readings(kind, mangled))
        if len(readings) > 1:
            readings = {r for r in readings if self._module_length(r)}
        if len(readings) > 1:
            readings = {r for r in readings if self._evident(r, mangled)}
        suffix = _suffix(rest)
        if len(readings) != 1 or suffix is None:
            return None
        *scopes, name = readings.pop()
        inner = _FUSED_NAME.fullmatch(name)
        if inner:
            if fused:
                return None
            fused, name = inner.groups()
        if name.startswith("__pyx_lambda_funcdef_"):
            name = "<lambda>"
        return ".".join((*scopes, name)) + (f" [fused {fused}]" if fused else "") + suffix


def _suffix(rest: str) -> str | None:
    """What follows a Cython function's C name, for its Python name: its outlined
    part as `` [clone .suffix]``, not its C++ parameter types; None if unexpected."""
    if not rest or rest.startswith("."):
        return f" [clone {rest}]" if rest else ""
    shortened = short(rest)
    params = next((p for p in ("(…)", "()") if shortened.startswith(p)), None)
    return shortened[len(params):] if params else None


# ---- C++ ----------------------------------------------------------------------------------------
# Like the compact views of profilers (pprof's default, Chromium's supersize): template
# arguments collapse to <…>, parameter lists to (…) (() stays), the return type, ABI tags
# ([abi:cxx11]) and the qualifiers of a member function (const, &) go.  Lambdas keep
# their number ({lambda(…)#1}, LLVM's 'lambda'(…)), "(anonymous namespace)" and clone
# suffixes stay (LLVM's (.cold) written as GNU's [clone .cold]).  The angle brackets of
# operator<, operator<<, operator-> ... are no templates.
_OPERATOR = re.compile(
    r"operator\s*(?:<<=|>>=|<=>|<<|>>|<=|>=|->\*|->|<|>|\(\)|\[\]|(?:new|delete)(?:\[\])?\b)"
    r"|operator\b")
_QUALIFIERS = re.compile(r"(?:\s*(?:const\b|volatile\b|noexcept\b|&&|&))*")
_OPENS = {"<": ">", "(": ")", "[": "]", "{": "}"}


def _operator_at(name: str, i: int) -> re.Match | None:
    """The operator name (``operator<<``, ``operator()``, ...) starting at ``name[i]``."""
    if not name.startswith("operator", i) or (i and (name[i - 1].isalnum() or
                                                      name[i - 1] == "_")):
        return None
    return _OPERATOR.match(name, i)


def _closing(name: str, i: int) -> int:
    """Index of the bracket that closes the one at ``name[i]``, -1 if there is none."""
    expected: list[str] = []
    j = i
    while j < len(name):
        op = _operator_at(name, j)
        if op or name.startswith("->", j):
            j = op.end() if op else j + 2
            continue
        c = name[j]
        if c in _OPENS:
            expected.append(_OPENS[c])
        elif c in ">)]}":
            if not expected or expected.pop() != c:
                return -1
            if not expected:
                return j
        j += 1
    return -1


def short(name: str) -> str:
    """A C++ function name shortened for display:
    ``at::TensorIteratorBase::for_each(c10::function_ref<void (char**, long const*, long,
    long)>, long)`` -> ``at::TensorIteratorBase::for_each(…)``.  Other names, and
    names whose brackets do not balance, are returned as they are."""
    if not any(c in name for c in _OPENS):
        return name
    out: list[str] = []
    cut = 0  # where the name starts in out, after its return type
    params = frozen = False  # a parameter list was seen; an operator (no return type after)
    braces = 0  # depth in {lambda(…)#1}, {unnamed type#1}: what they hold is shortened too
    i = 0
    while i < len(name):
        c = name[i]
        op = _operator_at(name, i)
        if op:
            out.append(op.group())
            frozen = True
            i = op.end()
            continue
        if c in "<([":
            j = _closing(name, i)
            if j < 0:
                return name
            inner = name[i + 1:j]
            if c == "[":
                if not inner.startswith("abi:"):
                    out.append(name[i:j + 1])
            elif c == "(" and inner == "anonymous namespace":
                out.append(name[i:j + 1])
            elif c == "(" and inner.startswith("."):
                out.append(f"[clone {inner}]")
            else:
                out.append(c + ("…" if inner.strip() else "") + name[j])
                if c == "(" and not braces and (i == 0 or name[i - 1] != " "):
                    params = True
                    j = _QUALIFIERS.match(name, j + 1).end() - 1
            i = j
        elif c in ">)]" or (c == "}" and not braces):
            return name
        else:
            braces += (c == "{") - (c == "}")
            if c == " " and not (params or frozen or braces):
                cut = len(out) + 1
            out.append(c)
        i += 1
    if braces:
        return name
    shortened = "".join(out[cut:] if params else out)
    # a function returning a function pointer, void (*f(int))(long): no name to keep
    return name if cut and shortened.startswith("(…)") else shortened


def readable(function: str, cython: CythonNames | None = None) -> str:
    """The name to show for a symbolizer's function name: the Python-level name of
    a Cython function (read with ``cython``, its module's symbols, when given), else
    the name shortened (``short``)."""
    return (cython or CythonNames()).python_name(function) or short(function)
