"""Analysis: what a trace means.

* ``pairing``: begin/end pairing and the relations between paired tables, in C
  (``_core.pair``, ``_core.find``; ``_core.pair_events``: every kind of
  construct in one pass over the records), shared with the slice exports.
* ``tables``: one row per construct instance (``Trace.parallel_regions()``,
  ``tasks()``, ``sync()``, ``mutex()``, ``user_regions()`` ...) and the
  symbols of code addresses (``symbols``).
* ``states``: the thread states (busy, barrier/sync/lock wait, idle): the one
  definition of busy.
* ``samples``: the runtime's sampled states.
* ``metrics``: constructs, imbalance, task granularity, lock contention,
  utilisation; ``advice``: what to do, computed from them (rules with
  thresholds); ``summary``: the answers together, as tables and as text.
* ``ranks``: across the processes of an MPI job: each rank's figures side by
  side, the rank late per phase and what the others lost waiting for it.
* ``flame``: the threads' time per Python stack, location and thread state
  (the flame view, the speedscope export).
* ``cache``: the derived tables of each trace, made once.
* ``profile``: the answers of a profile's aggregates (quantiles from log2
  histograms); ``dataset``: a dataset's answers, the per-trace analysis run
  per partition and merged (counts, totals, extremes exact; quantiles from
  merged log2 histograms).

Modules here take a Trace (``ompt_py.trace``, imported only for type
checking) and import only the base modules (``records``, ``meta``,
``units``, ``errors``, ``elf``) and each other; never live collection, input/output or
presentation.
"""
