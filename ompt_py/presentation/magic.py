"""Jupyter/IPython integration: ``%load_ext ompt_py`` and the ``%%ompt`` cell magic.

Load the extension in the first cell of the notebook, before any cell starts
the OpenMP runtime (the runtime looks for tools only once, when it starts)::

    %load_ext ompt_py

    %%ompt
    my_ext.work()          # traced; the Trace goes into the variable _ompt

The magic runs the cell under ``ompt_py.trace()``, stores the Trace in a
variable and shows ``Trace.summary()`` and the interactive view
(``Trace.view()``: timeline and flame; with Bokeh, else the timeline as an
image, ``Trace.plot_timeline()``) below the cell: with the Python line of
the cell (or of the code it calls) that started each construct, as
``ompt-py report`` shows them (``--python-stacks`` sets the capture: on, off
or a depth).  With ``--subprocess`` the cell runs in a
fresh Python process that has the tool attached, for a kernel whose runtime
started before the extension was loaded; only the trace and the printed
output come back.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.core.pylabtools import print_figure
from IPython.display import Image, display

from ..errors import AttachError, ConfigError
from ..trace import Trace, load, trace
from .plots import display_in_ipython
from .view import require_bokeh

DEFAULT_VARIABLE = "_ompt"

# The fresh process of --subprocess: the kernel's sys.path, then ompt_py before
# anything else, the --setup code untraced, the cell traced, the trace saved.
_CHILD = """\
import sys
sys.path[:] = {path!r}
import ompt_py

namespace = {{"__name__": "__main__"}}
for source, name in {setups!r}:
    exec(compile(source, name, "exec"), namespace)
with open({cell_file!r}, encoding="utf-8") as f:
    cell = compile(f.read(), {cell_file!r}, "exec")
with ompt_py.trace(python_stacks={python_stacks!r}) as trace:
    exec(cell, namespace)
trace.save({out!r})
"""


def _cannot_trace_message(error: Exception) -> str:
    """What the cell shows when this kernel cannot be traced, with the remedies."""
    text = f"%%ompt cannot trace this kernel: {error}"
    if isinstance(error, AttachError):
        text += (
            "\n\nIn a notebook this usually means that the OpenMP runtime started (a cell "
            "imported or ran OpenMP code) before `%load_ext ompt_py`. Put `%load_ext ompt_py` "
            "in the first cell of the notebook, restart the kernel and run the cells again. "
            "Or trace this cell in a fresh Python process with `%%ompt --subprocess`: it "
            "does not see this kernel's variables, so pass the code that prepares them with "
            "`--setup VAR` (VAR: a string variable holding Python code); see `%%ompt?`."
        )
    return text


def _execute(shell: InteractiveShell, cell: str) -> Any:
    """Runs the cell in the user namespace, as a cell runs; returns the value of its
    last line when that is an expression not ended by ';', else None."""
    tree = shell.transform_ast(shell.compile.ast_parse(shell.transform_cell(cell)))
    last = None
    if (tree.body and isinstance(tree.body[-1], ast.Expr)
            and not shell.displayhook.semicolon_at_end_of_expression(cell)):
        last = ast.Expression(tree.body.pop().value)
    exec(shell.compile(tree, "<%%ompt cell>", "exec"), shell.user_ns)
    if last is not None:
        return eval(shell.compile(last, "<%%ompt cell>", "eval"), shell.user_ns)
    return None


def _run_in_subprocess(shell: InteractiveShell, cell: str, setup_vars: list[str],
                       python_stacks: str | None) -> Trace:
    """Runs the cell as plain Python in a fresh interpreter with the tool attached and
    returns its trace.  The process has this kernel's working directory, environment
    and sys.path, none of its variables; the code of the ``setup_vars`` runs first;
    ``python_stacks``: ompt_py.trace()'s."""
    setups = []
    for name in setup_vars:
        source = shell.user_ns.get(name)
        if not isinstance(source, str):
            raise UsageError(
                f"--setup {name}: expected the name of a string variable holding Python code "
                f"(e.g. {name} = 'import my_ext'), found "
                + ("no such variable" if name not in shell.user_ns else type(source).__name__)
            )
        setups.append((source, f"<%%ompt --setup {name}>"))
    with tempfile.TemporaryDirectory(prefix="ompt-cell-") as tmp:
        cell_file = os.path.join(tmp, "cell.py")
        with open(cell_file, "w", encoding="utf-8") as f:
            f.write(cell)
        out = os.path.join(tmp, "trace.parquet")
        script = _CHILD.format(path=[str(p) for p in sys.path], setups=setups,
                               cell_file=cell_file, out=out, python_stacks=python_stacks)
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=os.getcwd())
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            raise UsageError(
                f"the subprocess failed (exit status {r.returncode}); its error is above. It "
                "runs the cell as plain Python (no magics) and does not see this kernel's "
                "variables: define what the cell needs in the cell or with --setup VAR."
            )
        return load(out)


def show(t: Trace, plot: bool = True) -> None:
    """Displays the trace's summary and, with ``plot``, its interactive view (without
    Bokeh: the timeline as an image, and what to install for the view)."""
    if len(t) == 0:
        print("%%ompt: no OpenMP events were recorded (the cell ran no OpenMP code on LLVM "
              "libomp).")
        return
    display(t.summary())
    if not plot:
        return
    try:
        require_bokeh()
    except ConfigError as e:
        display(Image(data=print_figure(t.plot_timeline(), "png"), format="png"))
        print(f"%%ompt: {e}")
        return
    display(t.view())


@magics_class
class OmptMagics(Magics):
    """The ``%%ompt`` cell magic."""

    @magic_arguments()
    @argument("-o", "--output", metavar="VAR", default=DEFAULT_VARIABLE,
              help=f"variable that receives the Trace (default: {DEFAULT_VARIABLE})")
    @argument("--no-plot", action="store_true",
              help="show the summary but not the timeline and flame view")
    @argument("-q", "--quiet", action="store_true", help="show neither summary nor timeline")
    @argument("--subprocess", action="store_true",
              help="run the cell as plain Python in a fresh process with the tool attached "
                   "(for a kernel whose OpenMP runtime started before %%load_ext ompt_py); "
                   "it has this kernel's working directory, environment and sys.path but "
                   "none of its variables, and only the trace and the printed output come "
                   "back")
    @argument("--setup", metavar="VAR", action="append", default=[],
              help="with --subprocess: the name of a string variable holding Python code "
                   "that the subprocess runs first, untraced (imports, loading libraries, "
                   "preparing data); may be repeated")
    @argument("--python-stacks", metavar="SETTING", default=None,
              help="record the Python call stack of each construct the cell starts: on, "
                   "off, or the number of frames to keep (default: the environment's "
                   "OMPTPY_PYTHON_STACKS, else on); see ompt_py.trace(python_stacks=...)")
    @cell_magic
    def ompt(self, line: str, cell: str) -> Any:
        """%%ompt: trace the OpenMP runtime while the cell runs; show the summary and
        the interactive timeline and flame view.

        The Trace is stored in a variable (``_ompt`` unless ``-o VAR``).  In the
        kernel (the default), the cell runs as any cell does and the value of
        its last line, if an expression, is the cell's result; when the cell
        raises, the trace up to the error is stored all the same.  This needs
        ``%load_ext ompt_py`` in the first cell, before any OpenMP code runs;
        otherwise use ``--subprocess``.
        """
        args = parse_argstring(self.ompt, line)
        if not args.output.isidentifier():
            raise UsageError(f"-o {args.output}: give a Python variable name")
        if args.setup and not args.subprocess:
            raise UsageError("--setup applies to --subprocess only: in the kernel the cell "
                             "sees the notebook's variables")
        try:  # the setting checked here for --subprocess too
            t = trace(python_stacks=args.python_stacks)
        except ValueError as e:
            raise UsageError(f"--python-stacks {args.python_stacks}: use on, off or the number "
                             f"of frames to keep ({e})") from None
        result = None
        if args.subprocess:
            t = _run_in_subprocess(self.shell, cell, args.setup, args.python_stacks)
            self.shell.user_ns[args.output] = t
        else:
            try:
                t.start()
            except (AttachError, ConfigError) as e:
                raise UsageError(_cannot_trace_message(e)) from None
            try:
                result = _execute(self.shell, cell)
            except BaseException:
                print(f"%%ompt: the cell raised; the trace up to the error is in "
                      f"{args.output}", file=sys.stderr)
                raise
            finally:
                t.stop()
                self.shell.user_ns[args.output] = t
        if not args.quiet:
            show(t, plot=not args.no_plot)
        return result


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext ompt_py``: registers %%ompt; Figures of the plot methods display."""
    ipython.register_magics(OmptMagics)
    display_in_ipython()
