"""Presentation: what a person reads.

* ``report``: ``ompt-py report``, as text and as one HTML page.
* ``plots``: matplotlib figures (timeline, thread states, task durations,
  imbalance).
* ``magic``: ``%%ompt`` in Jupyter (IPython needed).
* ``cli``: the ``ompt-py`` command.

The top layer: modules here may import every layer below (the Trace,
analysis, input/output, live collection); nothing below imports them except
the Trace's facade methods, when called.
"""
