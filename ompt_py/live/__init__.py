"""Live collection: what runs in the traced process.

* ``attach``: makes the OpenMP runtime load the tool (``OMP_TOOL_LIBRARIES``)
  and tells whether it did; ``runtime``: the runtime fallback (LLVM libomp
  for libgomp-built code, ``OMPTPY_RUNTIME``); ``doctor``: why a process is
  not traced and what to do, and which OpenMP runtime a program links.
* ``recording``: the windows of ``ompt_py.trace()`` (start/stop).
* ``handlers`` (Python callbacks, ``ompt_py.on``), ``native`` (C callbacks
  in the tool's hot path), ``control`` (``omp_control_tool``'s commands),
  ``markers`` (``ompt_py.region``).
* ``runhook``: the start-up hook of every Python process ``ompt-py run``
  starts (standard library only).
* ``launch``: runs the command of ``ompt-py run`` (its process group, the
  signals forwarded to it, the terminal, no orphan).

Modules here import the base modules (``records``, ``meta``, ``errors``,
``elf``) and each other; ``ompt_py.trace`` only inside the function that needs
it; never analysis, input/output or presentation.
"""
