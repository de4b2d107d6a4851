"""``Profile``: profile mode's aggregates (``ompt-py run --profile``,
OMPTPY_PROFILE=on) with the answers a trace gives, where aggregates can give them.

Data with a thin facade, as ``Trace``: the tables are ``parts``
(io.profile.ProfileParts: the tool's aggregates per thread, times in
nanoseconds); the answers are computed by ompt_py.analysis.profile, imported
when a method is called.  ``ompt_py.load`` gives a Profile for a profile file
or for raw files written in profile mode; ``ompt_py.trace(profile=True)`` one
of this process (``start``/``stop``).
"""

from __future__ import annotations

import atexit
import json
import os
from typing import TYPE_CHECKING

from .errors import ConfigError, OmptPyError

if TYPE_CHECKING:
    import pandas as pd

    from .analysis.summary import Summary
    from .io.profile import ProfileParts

#: The profile recording in this process, if any (one at a time).
_recording: Profile | None = None


class Profile:
    """A run's profile: ``parts`` holds its tables (``constructs``,
    ``regions_threads``, ``locks``, ``tasks``: see io.profile.ProfileParts) and
    ``meta`` its processes."""

    def __init__(self, parts: ProfileParts | None = None,
                 path: str | os.PathLike | None = None) -> None:
        """A profile of ``parts``; without them, one of this process to take at
        stop() (saved at ``path`` then, if given): see ompt_py.trace(profile=True)."""
        self._parts = parts
        self._live = parts is None
        self._path = os.fspath(path) if path is not None else None

    @property
    def parts(self) -> ProfileParts:
        if self._parts is None:
            raise OmptPyError("this profile has no data yet: stop() it (or leave its with "
                              "block) first")
        return self._parts

    def start(self) -> Profile:
        """Profile this process from now until stop(): AttachError when its runtime
        cannot be observed, ConfigError when profile mode is off (OMPTPY_PROFILE=on
        must be in the environment before ompt_py is imported: the tool reads it
        once, at that import).  The tool aggregates while a profile records; its
        tables are the process's, so stop() gives what every window of every
        profile of this process aggregated so far."""
        global _recording
        from . import _core
        from .live import attach

        if not self._live:
            raise OmptPyError("a loaded profile cannot record; use ompt_py.trace(profile=True) "
                              "for a new one")
        if _recording is self:
            return self
        if _recording is not None:
            raise OmptPyError("another ompt_py profile is recording in this process; stop() "
                              "it first")
        attach.ensure_attachable()
        if not attach.meta()["config"].get("profile"):
            raise ConfigError("profile mode is off in this process: set OMPTPY_PROFILE=on in "
                              "the environment before ompt_py is imported (the tool reads it "
                              "once, at that import), or use ompt-py run --profile")
        if self._path:
            atexit.register(self.stop)  # saved at exit too, as a trace with a path is
        _core.set_recording(True)  # the sink on: profile.c's handlers aggregate
        _recording = self
        return self

    @property
    def recording(self) -> bool:
        return _recording is self

    def stop(self) -> Profile:
        """The aggregates so far become the profile's (saved at its path, if any);
        start() again takes them anew at the next stop()."""
        from . import _core
        from .io.profile import from_memory
        from .live import attach

        global _recording
        if _recording is not self:
            return self
        _recording = None
        _core.set_recording(False)
        if self._path:
            atexit.unregister(self.stop)
        self._parts = from_memory(attach.meta(), json.loads(_core.stats()), _core.profile())
        if self._path:
            self.save(self._path)
        return self

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
        if self._parts is None:
            return f"<ompt_py.Profile: {'recording' if self.recording else 'not started'}>"
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

    def constructs(self, by: str = "construct", raw: bool = False) -> pd.DataFrame:
        """Count, total, mean, p50, p95 (estimated), max time per construct and kind
        (``by="source"``: and per source location; ``raw=True``: the runtime's kind
        names), as Trace.constructs()."""
        from .analysis import profile

        return profile.constructs(self, by=by, raw=raw)

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

    def advice(self) -> pd.DataFrame:
        """What to do, where a profile's aggregates allow it (regions too short for
        their team, contended locks; ``attrs["cannot"]``: the rules it cannot give):
        see ompt_py.analysis.profile.advice and docs/reports.md."""
        from .analysis import profile

        return profile.advice(self)

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()
