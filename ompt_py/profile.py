"""``Profile``: profile mode's aggregates (``ompt-py run --profile``,
OMPTPY_PROFILE=on) with the answers a trace gives, where aggregates can give them.

Data with a thin facade, as ``Trace``: the tables are ``parts``
(io.profile.ProfileParts: the tool's aggregates per thread, times in
nanoseconds); the answers are computed by ompt_py.analysis.profile, imported
when a method is called.  ``ompt_py.load`` gives a Profile for a profile file
or for raw files written in profile mode.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from .analysis.summary import Summary
    from .io.profile import ProfileParts


class Profile:
    """A run's profile: ``parts`` holds its tables (``constructs``,
    ``regions_threads``, ``locks``, ``tasks``: see io.profile.ProfileParts) and
    ``meta`` its processes."""

    def __init__(self, parts: ProfileParts) -> None:
        self.parts = parts

    @classmethod
    def from_raw(cls, path: str | os.PathLike) -> Profile:
        """The profile of a raw file or a directory of them (``OMPTPY_OUTPUT`` of a run
        with OMPTPY_PROFILE=on)."""
        from .io.profile import load_profile

        return cls(load_profile(path))

    @classmethod
    def from_parquet(cls, path: str | os.PathLike) -> Profile:
        """A profile file written by ``save``."""
        from .io.profile import read

        return cls(read(path))

    @property
    def meta(self) -> dict:
        return self.parts.meta

    def __repr__(self) -> str:
        p = self.parts
        return (f"<ompt_py.Profile: {len(self.meta['processes'])} process(es), "
                f"{len(p.constructs):,} construct, {len(p.regions_threads):,} region, "
                f"{len(p.locks):,} lock and {len(p.tasks):,} task aggregates>")

    def save(self, path: str | os.PathLike) -> None:
        """Writes the profile as one Parquet file (``ompt_py.load`` reads it back; its
        layout: io.profile)."""
        from .io.profile import write

        write(self.parts, path)

    # ---- answers (ompt_py.analysis.profile: the trace's where a profile can give them) ----

    def summary(self, top: int = 10) -> Summary:
        """The main answers together, as Trace.summary() gives them where a profile has
        the data (see ompt_py.analysis.profile.summary)."""
        from .analysis import profile

        return profile.summary(self, top=top)

    def constructs(self, by: str = "construct") -> pd.DataFrame:
        """Count, total, mean, p50, p95 (estimated), max time per construct and kind
        (``by="source"``: and per source location), as Trace.constructs()."""
        from .analysis import profile

        return profile.constructs(self, by=by)

    def imbalance(self, per_thread: bool = False, by: str = "source") -> pd.DataFrame:
        """Per parallel region source location: imbalance and time lost of the threads'
        busy time summed over its instances, barrier-wait and wait shares
        (``per_thread=True``: one row per location and thread)."""
        from .analysis import profile

        return profile.imbalance(self, per_thread=per_thread, by=by)

    def task_granularity(self) -> pd.DataFrame:
        """Histogram of explicit task run times on the profile's log2 bins."""
        from .analysis import profile

        return profile.task_granularity(self)

    def lock_contention(self, by: str = "lock") -> pd.DataFrame:
        """Wait and hold time per lock, critical section and ordered region, with the
        source location where it was most often taken (``by="source"``: per lock and
        source location)."""
        from .analysis import profile

        return profile.lock_contention(self, by=by)

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()
