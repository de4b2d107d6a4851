"""``ompt_py.control``: omp_control_tool's commands, from Python.

The call goes to the tool directly (``omptpy_control_tool`` in
libomptpy.so), the same function the runtime calls for omp_control_tool in
C/C++ code, rather than through the runtime's ``omp_control_tool`` via
ctypes: that way it works before the OpenMP runtime has started (the
runtime answers -2, "no tool", until then), it does not depend on finding
the right libomp in the process (there may be several), and it never
initialises a runtime as a side effect.  The command is recorded as a
``control_tool`` event (codeptr 0) like one from C, so handlers see both.
"""

from __future__ import annotations

from .. import _core
from . import attach

#: omp_control_tool's standard commands (OpenMP 5.2, 3.14).
COMMANDS = {"start": 1, "pause": 2, "flush": 3, "end": 4}
#: Commands from this number up are the tool's own (omp_control_tool_t).
TOOL_COMMANDS = 64
#: What omp_control_tool returns (omp_control_tool_result_t).
RESULTS = {-2: "notool", -1: "nocallback", 0: "success", 1: "ignored"}


def control(command: str | int, modifier: int = 0) -> int:
    """Send a tool-control command, as omp_control_tool(command, modifier, NULL) does.

    ``command``: ``"start"`` (open the trace sink again), ``"pause"`` and
    ``"end"`` (close it: a trace window records nothing until a start),
    ``"flush"`` (ask every traced device to hand its trace buffers back
    (ompt_flush_trace), then move buffered records to the sink and to
    handlers), or a
    tool-specific number from 64 up, which ompt-py records (with
    ``modifier``) for handlers and trace readers.  Handlers keep receiving
    events whatever the command.  Returns what omp_control_tool would: 0
    (success), 1 (ignored), -2 (no tool: the tool is off in this process).
    """
    if isinstance(command, str):
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}; use one of "
                             f"{', '.join(COMMANDS)} or a number from {TOOL_COMMANDS} up")
        code = COMMANDS[command]
    elif isinstance(command, int) and not isinstance(command, bool):
        if not (1 <= command <= 4 or TOOL_COMMANDS <= command < 1 << 64):
            raise ValueError(f"command {command} is reserved by OpenMP; use 1 to 4 "
                             f"({', '.join(COMMANDS)}) or a number from {TOOL_COMMANDS} up")
        code = command
    else:
        raise TypeError(f"command must be a name or an int, not {type(command).__name__}")
    if not isinstance(modifier, int) or isinstance(modifier, bool) or not 0 <= modifier < 1 << 64:
        raise ValueError(f"modifier must be an int from 0 to 2**64-1, not {modifier!r}")
    attach.check_config()
    return _core.control_tool(code, modifier)
