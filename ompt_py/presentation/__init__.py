"""Presentation: what a person reads.

* ``report``: ``ompt-py report``, as text for the terminal's width
  (ompt_py.layout) and as one HTML page.
* ``plots``: matplotlib figures (timeline, thread states, task durations,
  imbalance, lock contention, flame, and all of them for ``--plot``).
* ``timeline``: the bars a timeline draws (shared by ``plots`` and ``view``).
* ``view``: the interactive view (Bokeh: one self-contained HTML file, the
  timeline and the flame), ``ompt-py view``; ``lod``: its levels of detail.
* ``magic``: ``%%ompt`` in Jupyter (IPython needed).
* ``cli``: the ``ompt-py`` command.

The top layer: modules here may import every layer below (the Trace,
analysis, input/output, live collection); nothing below imports them except
the Trace's facade methods, when called.
"""
