"""A Python program whose known lines start OpenMP constructs: the Python
stack tests run it (tests/live/test_pystacks.py), and it made the stored trace
tests/data/pystacks-inprocess.parquet.  A line that starts constructs ends
with a comment ``at: NAME``; the tests find lines by these names
(tests/conftest.py's ``marked_lines``).

    python pystacks_app.py TRACE_PATH [PYTHON_STACKS]
    ompt-py run ... pystacks_app.py --untraced

runs main() in ompt_py.trace(python_stacks=PYTHON_STACKS: on, off or a depth;
default: the environment's) and saves the trace to TRACE_PATH; or only runs
main() (under ``ompt-py run``).
"""

from __future__ import annotations

import asyncio
import sys
import threading

import ompt_work_ext as w


def regions(n: int) -> None:
    w.parallel(n)  # at: regions


def without_gil(n: int) -> None:
    w.parallel_nogil(n)  # at: nogil


def helper() -> None:
    regions(2)  # at: helper


def locked() -> None:
    w.critical(20)  # at: critical


def generated() -> object:
    w.parallel(1)  # at: generator
    yield 1


async def coroutine() -> None:
    w.parallel(1)  # at: coroutine


def short_lived() -> None:
    source = "def gone():\n    w.parallel(1)  # at: exec\n"
    scope = {"w": w}
    exec(compile(source, "<generated>", "exec"), scope)
    scope["gone"]()
    del scope  # the code object of gone() dies here, before the trace is read


def main() -> None:
    import ompt_py

    helper()  # at: main-helper
    without_gil(2)  # at: main-nogil
    locked()
    w.single(3)  # at: single
    w.tasks(4)  # at: tasks
    w.serial_tasks(3)  # at: serial-tasks
    w.nested()  # at: nested
    with ompt_py.region("phase"):  # at: marker
        regions(1)  # at: in-marker
    worker = threading.Thread(target=without_gil, args=(3,), name="worker")
    worker.start()
    worker.join()
    (lambda: w.parallel(1))()  # at: lambda
    list(generated())
    asyncio.run(coroutine())
    short_lived()


if __name__ == "__main__":
    import ompt_py

    if sys.argv[1] == "--untraced":
        main()
    else:
        with ompt_py.trace(python_stacks=sys.argv[2] if len(sys.argv) > 2 else None) as t:
            main()
        t.save(sys.argv[1])
