"""The house rules of ompt_py's layers (docs/development.md, Layout): every module imports
alone, the import graph has no cycle, and no layer imports a higher one or
another layer's underscore names.

The graph is read from the sources (``ast``): an edge for every ``import`` at
module level, outside ``if TYPE_CHECKING:``; imports inside functions are
checked against the same rules, except the facades' methods (trace.py,
profile.py and dataset.py import their layers when a method is called) and the few lazy
imports named in LAZY.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ompt_py"

#: Layer of each module: the first matching prefix.
LAYERS = [
    ("ompt_py.live.", "live"), ("ompt_py.io.", "io"), ("ompt_py.analysis.", "analysis"),
    ("ompt_py.presentation.", "presentation"), ("ompt_py.live", "live"), ("ompt_py.io", "io"),
    ("ompt_py.analysis", "analysis"), ("ompt_py.presentation", "presentation"),
    ("ompt_py.trace", "trace"), ("ompt_py.profile", "trace"),  # the facades
    ("ompt_py.dataset", "trace"),
    ("ompt_py.__init__", "package"), ("ompt_py.__main__", "package"),
    ("ompt_py", "base"),  # _core, errors, records, meta, schema, units, elf
]
#: What each layer may import at module level.
ALLOWED = {
    "base": {"base"},
    "trace": {"base"},
    "live": {"base", "live"},
    "analysis": {"base", "analysis"},
    "io": {"base", "analysis", "io"},
    "presentation": {"base", "trace", "live", "analysis", "io", "presentation"},
    "package": {"base", "trace", "live", "analysis", "io", "presentation"},
}
#: Imports inside functions that go up on purpose: (module, imported module).
LAZY = {
    ("ompt_py.live.handlers", "ompt_py.trace"),  # frame=True batches: Trace.to_pandas
    ("ompt_py.__init__", "ompt_py.presentation.magic"),  # %load_ext ompt_py
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name if parts[-1] != "__init__" or len(parts) > 2 else "ompt_py.__init__"] = path
    return out


MODULES = _modules()


def layer(module: str) -> str:
    return next(name for prefix, name in LAYERS
                if module == prefix.rstrip(".") or module.startswith(prefix))


def _resolve(module: str, node: ast.ImportFrom | ast.Import) -> list[tuple[str, list[str]]]:
    """The ompt_py modules an import statement names, with the names it takes."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names if a.name.startswith("ompt_py")]
    package = module.split(".")
    is_package = MODULES.get(module, Path()).name == "__init__.py" or module == "ompt_py.__init__"
    base = package if is_package and module != "ompt_py.__init__" else package[:-1]
    if module == "ompt_py.__init__":
        base = ["ompt_py"]
    if node.level:
        base = base[:len(base) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    if not target.startswith("ompt_py"):
        return []
    out = []
    for alias in node.names:  # `from . import x` may name a module
        sub = f"{target}.{alias.name}"
        if sub in MODULES or sub == "ompt_py._core":  # _core: the C extension
            out.append((sub, []))
        else:
            out.append((target, [alias.name]))
    return out


def _imports(module: str) -> list[tuple[str, list[str], bool]]:
    """(imported module, names taken, at module level) of every import of ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # for type checkers only
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((m, names, top) for m, names in _resolve(module, child))
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.ClassDef, ast.Lambda))
            visit(child, inner)

    visit(tree, True)
    return found


def _target(name: str) -> str:
    """A module of the package named in an import (the package itself: its __init__)."""
    return "ompt_py.__init__" if name == "ompt_py" else name


def test_every_module_is_known():
    assert {"ompt_py.trace", "ompt_py.records", "ompt_py.analysis.pairing", "ompt_py.io.perfetto",
            "ompt_py.live.attach", "ompt_py.presentation.cli"} <= set(MODULES)


def test_the_import_graph_has_no_cycle():
    graph = {m: sorted({_target(t) for t, _, top in _imports(m) if top and _target(t) != m})
             for m in MODULES}
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in graph.get(m, []):
            if state.get(n) == 1:
                cycle = [*path[path.index(n):], n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n in graph and not state.get(n):
                walk(n)
        path.pop()
        state[m] = 2

    for m in graph:
        if not state.get(m):
            walk(m)


def test_no_layer_imports_a_higher_one_or_another_layers_private_names():
    problems = []
    for module in MODULES:
        mine = layer(module)
        for target, names, top in _imports(module):
            theirs = layer(target)
            if top and theirs not in ALLOWED[mine]:
                problems.append(f"{module} imports {target} ({mine} -> {theirs})")
            elif not top and mine != "trace" and theirs not in ALLOWED[mine] \
                    and (module, target) not in LAZY:
                problems.append(f"{module} imports {target} in a function ({mine} -> {theirs})")
            private = [n for n in names if n.startswith("_")]
            if private and theirs != mine and target != "ompt_py":
                problems.append(f"{module} takes {private} from {target}")
    assert not problems, "\n".join(problems)


@pytest.mark.pythons
def test_every_module_is_installed_and_imports():
    """A fresh interpreter imports every module of the sources, from where ompt_py is
    installed (the magic needs IPython): `make test-pythons` runs it on each Python."""
    names = [m.removesuffix(".__init__") for m in MODULES if not m.endswith("__main__")]
    if importlib.util.find_spec("IPython") is None:
        names.remove("ompt_py.presentation.magic")
    code = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)"
    r = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_each_module_imports_alone(module):
    """A fresh interpreter imports the module by itself (no cycle that only an
    earlier import of another module hides); the magic needs IPython."""
    name = module.removesuffix(".__init__")
    if name == "ompt_py.presentation.magic":
        pytest.importorskip("IPython")
    code = (f"import importlib, json, sys; importlib.import_module({name!r}); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('ompt_py'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout.splitlines()[-1]))
    # The package's public API never pulls in presentation (matplotlib, IPython).
    if layer(module) not in ("presentation",):
        assert not {m for m in loaded if m.startswith("ompt_py.presentation")}, sorted(loaded)
