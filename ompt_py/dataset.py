"""A job's trace too large for one process's memory, opened lazily
(``ompt_py.open_dataset``) and analysed partition by partition, in this process
or on a Dask cluster.

A Dataset is the partitions of a dataset directory (one Parquet file per
process, ``DIR/pid=N/part-0.parquet``), found and checked from their footers
(ompt_py.io.dataset.scan: what ``ompt_py.load`` of the directory would leave
out is left out, and said).  ``partition(i)`` / ``trace(rank=...)`` read one
into a Trace on the dataset's time axis (each rank on rank 0's clock, as
``load`` puts them); ``map(fn, client=None)`` runs ``fn`` on each partition's
Trace, in this process one after the other or on Dask workers, each of which
reads its partition from the file (no Trace is shipped); the answers
(``summary``, ``constructs``, ...) map the per-trace analysis over the
partitions and merge the small results (ompt_py.analysis.dataset, which says
what is exact and what estimated); the exports (``to_perfetto``, ``to_csv``,
``to_otf2``) make a part per partition the same way and join them here
(ompt_py.io.dataset.export).  Like the Trace, a facade: each method imports
its layer when called.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError, TraceFileError

__all__ = ["Dataset", "connect", "open_dataset"]

if TYPE_CHECKING:
    import pandas as pd

    from .analysis.summary import Summary
    from .io.dataset import Partition
    from .trace import Trace

R = TypeVar("R")

#: What to install for Dataset.map on Dask.
DASK_EXTRA = "pip install 'ompt-py[dask]'"


@dataclass(frozen=True)
class _Unreadable:
    """A partition that could not be read where it was mapped (its file damaged
    after its footer was read): left out, and said."""

    source: str
    reason: str


def _read(part: Partition, origin: int | None) -> Trace:
    """One partition's Trace, on the dataset's time axis."""
    from .io import dataset
    from .trace import Trace

    return Trace._from(dataset.read(part, origin))


def _on_partition(fn: Callable[[Trace], R], part: Partition, origin: int | None
                  ) -> R | _Unreadable:
    """``fn`` of the partition's Trace (run where the partition is read: a Dask worker
    or this process); _Unreadable when its file cannot be read.  What the partition
    took is given back to the system before the next one (analysis.cache.give_back):
    Dask pauses a worker whose resident size nears its memory limit, and freed
    memory that the C library or Arrow's allocator keeps counts."""
    from .analysis import cache

    try:
        trace = _read(part, origin)
    except TraceFileError as e:
        return _Unreadable(part.path, str(e))
    result = fn(trace)
    del trace
    cache.give_back()
    return result


def _distributed() -> Any:
    """dask.distributed, or ConfigError saying how to install it."""
    try:
        import dask.distributed
    except ImportError as e:
        raise ConfigError(f"a dataset's work on a Dask cluster needs Dask, which is not "
                          f"installed ({e}): {DASK_EXTRA}") from e
    return dask.distributed


def connect(address: str, timeout: float = 30) -> Any:
    """A ``dask.distributed.Client`` of the scheduler at ``address`` (close it when
    done), for the ``client`` of a Dataset's methods; ConfigError when Dask is not
    installed or no scheduler answers there within ``timeout`` seconds."""
    distributed = _distributed()
    try:
        return distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as e:
        raise ConfigError(f"no Dask scheduler answered at {address!r} ({e}); start one "
                          "(dask scheduler) and give the address it prints, such as "
                          "tcp://host:8786") from e


class Dataset:
    """A dataset opened lazily: its partitions (one per process), read one at a
    time when asked.  See the module, and ``open_dataset``."""

    def __init__(self, path: str | os.PathLike) -> None:
        """The dataset at ``path`` (open_dataset)."""
        from .io import dataset

        self.path = os.fspath(path)
        found = dataset.scan(self.path, stacklevel=3)
        self._partitions = found.partitions
        self.origin = found.origin
        #: The metadata of the whole dataset, as Trace.meta of ``ompt_py.load(path)``.
        self.meta = found.meta

    # ---- the partitions -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._partitions)

    def __repr__(self) -> str:
        events = sum(p.rows for p in self._partitions)
        return f"<ompt_py.Dataset {self.path}: {len(self)} partitions, {events:,} events>"

    @property
    def partitions(self) -> list[Partition]:
        """The partitions (file, pid, rank, events, origin, ``process``: its metadata,
        ``clock``: its clock's fit to rank 0's), in rank order."""
        return list(self._partitions)

    @property
    def partition_ranks(self) -> list[int | None]:
        """Each partition's job rank (None: its process had none).  (``ranks()`` is
        left for the per-rank table of Trace.ranks(), concatenated: docs/dataset.md.)"""
        return [p.rank for p in self._partitions]

    @property
    def pids(self) -> list[int]:
        """Each partition's process id."""
        return [p.pid for p in self._partitions]

    @property
    def files(self) -> list[str]:
        """Each partition's Parquet file (for DuckDB, polars, pyarrow: docs/dataset.md)."""
        return [p.path for p in self._partitions]

    def partition(self, i: int) -> Trace:
        """Partition ``i``'s Trace (read now), on the dataset's time axis."""
        return _read(self._partitions[i], self.origin)

    def trace(self, rank: int | None = None, pid: int | None = None) -> Trace:
        """The Trace of the partition of job rank ``rank``, or of process ``pid``."""
        if (rank is None) == (pid is None):
            raise ValueError("give rank= or pid= (one of them)")
        for i, p in enumerate(self._partitions):
            if (p.rank == rank) if pid is None else (p.pid == pid):
                return self.partition(i)
        which = f"rank {rank}" if pid is None else f"pid {pid}"
        raise KeyError(f"{self.path} has no partition of {which}: it has ranks "
                       f"{self.partition_ranks} (pids {self.pids})")

    def map(self, fn: Callable[[Trace], R], client: Any = None) -> list[R]:
        """``fn(trace)`` for each partition's Trace, in partition order.  Without a
        ``client`` one partition after the other in this process; with one (a
        ``dask.distributed.Client``) as Dask tasks, each reading its partition from
        its file on a worker (the files must be where the workers see them), and
        the results gathered here: keep them small.  A partition whose file cannot
        be read is left out (a TraceWarning, ``meta["skipped"]``) and the rest are
        mapped."""
        return self._map([fn] * len(self._partitions), client, stacklevel=3)

    def _map(self, fns: list[Callable[[Trace], R]], client: Any, stacklevel: int) -> list[R]:
        """map, with a function of each partition's own (``fns``, in partition order);
        ``stacklevel``: the warnings' (warnings.warn's) from the caller."""
        from .io import warn_skipped

        parts, origin = self._partitions, self.origin
        if client is None:
            results = [_on_partition(fn, p, origin) for fn, p in zip(fns, parts)]
        else:
            if not isinstance(client, _distributed().Client):
                raise TypeError(f"client: a dask.distributed.Client, not {type(client).__name__}")
            futures = client.map(_on_partition, fns, parts, [origin] * len(parts), pure=False)
            results = client.gather(futures)
        failed = [(p, r) for p, r in zip(parts, results) if isinstance(r, _Unreadable)]
        if failed:
            said = [{"source": r.source, "reason": r.reason} for _, r in failed]
            warn_skipped(said, stacklevel=stacklevel)
            self.meta["skipped"] = [*self.meta["skipped"], *said]
            gone = {id(p) for p, _ in failed}
            self._partitions = [p for p in parts if id(p) not in gone]
        return [r for r in results if not isinstance(r, _Unreadable)]

    def _mapper(self, client: Any) -> Callable[[Callable[[Trace], Any]], list]:
        return lambda fn: self.map(fn, client)

    # ---- answers, merged (ompt_py.analysis.dataset) -----------------------------------

    def summary(self, top: int = 10, client: Any = None) -> Summary:
        """Trace.summary() of the whole dataset, computed per partition (on Dask with
        a ``client``) and merged: see ompt_py.analysis.dataset for what is exact
        and what estimated; ``notes`` name the partition each note is of."""
        from .analysis import dataset, ranks

        python = any((p.get("python") or {}).get("stacks") for p in self.meta["processes"])
        job = ranks.several(self.meta)
        parts = self.map(lambda t: dataset.partial_summary(t, top, python, job), client)
        labels = [p.label for p in self._partitions]
        return dataset.merge_summary(parts, self.meta, self._mapper(client), top, labels)

    def constructs(self, by: str = "construct", raw: bool = False, client: Any = None
                   ) -> pd.DataFrame:
        """Trace.constructs() of the whole dataset (p50_ns, p95_ns by construct:
        estimated from merged log2 histograms)."""
        from .analysis import dataset

        return dataset.constructs(self._mapper(client), by=by, raw=raw)

    def imbalance(self, per_thread: bool = False, by: str = "source", client: Any = None
                  ) -> pd.DataFrame:
        """Trace.imbalance() of the whole dataset (default: per pid and source location;
        ``by="region"``: a row per region instance, as many as the dataset has)."""
        from .analysis import dataset

        return dataset.imbalance(self._mapper(client), per_thread=per_thread, by=by)

    def lock_contention(self, by: str = "lock", client: Any = None) -> pd.DataFrame:
        """Trace.lock_contention() of the whole dataset."""
        from .analysis import dataset

        return dataset.lock_contention(self._mapper(client), by=by)

    def ranks(self, client: Any = None) -> pd.DataFrame:
        """Trace.ranks() of the whole dataset: each rank's row from its partition."""
        from .analysis import dataset

        return dataset.rank_table(self._mapper(client))

    def rank_imbalance(self, by: str = "phase", client: Any = None) -> pd.DataFrame:
        """Trace.rank_imbalance() of the whole dataset: each partition's arrivals at
        the phases' synchronisations, compared."""
        from .analysis import dataset

        return dataset.rank_imbalance(self._mapper(client), len(self.meta["processes"]), by)

    def task_granularity(self, bins: Any = None, client: Any = None) -> pd.DataFrame:
        """Trace.task_granularity() of the whole dataset: the bins' counts exact (a
        second pass counts them in the dataset's bins), the medians estimated."""
        from .analysis import dataset

        return dataset.task_granularity(self._mapper(client), bins=bins)

    # ---- exports, partition by partition, joined (ompt_py.io.dataset.export) ------------

    def _export(self, path: str | os.PathLike, format: str, client: Any) -> None:
        from .io import dataset

        dataset.export(lambda fns: self._map(fns, client, stacklevel=6), self._partitions, path,
                       format, ranked=any(r is not None for r in self.partition_ranks))

    def to_perfetto(self, path: str | os.PathLike, client: Any = None) -> None:
        """One Perfetto trace of every partition, each rank a process on one time axis:
        JSON, or Perfetto's protobuf for a path ending in ``.pftrace`` or
        ``.perfetto-trace`` (as Trace.to_perfetto); the same content as the export
        of ``ompt_py.load(path)`` but for the flows' ids (and, in the protobuf, the
        track uuids and packet sequences: a partition's own).

        Each partition's part is made where it is read, one partition at a time:
        without a ``client`` in this process, one after the other; with one (a
        ``dask.distributed.Client``) on the workers.  The parts go to a temporary
        directory beside ``path`` (the workers must write where this process
        reads: the same machine, or a shared file system; a part missing or short
        is a TraceFileError), then are joined here into ``path`` in partition
        order, a part at a time; the directory is removed whatever happens.  The
        file is the same, byte for byte, with a client or without.  A partition
        that cannot be read is left out and said (TraceWarning), as ``map``
        says it."""
        from .io import format_of

        self._export(path, "perfetto-proto" if format_of(path) == "perfetto-proto"
                     else "perfetto", client)

    def to_csv(self, path: str | os.PathLike, client: Any = None) -> None:
        """One CSV file of every partition's events (the columns of Trace.to_pandas(),
        one header), the partitions one after the other, each in time order; made
        and joined as ``to_perfetto`` makes and joins its parts."""
        self._export(path, "csv", client)

    def to_otf2(self, path: str | os.PathLike, client: Any = None) -> None:
        """One OTF2 archive (the directory ``path``, as Trace.to_otf2) of every
        partition, each rank a location group on one time axis: the same events per
        location as the archive of ``ompt_py.load(path)`` (the locations' ids, and
        the strings' and regions', in another order).  Each partition's events are
        written where it is read (without a ``client`` in this process, with one on
        the workers) into an archive of its own ids, beside ``path``, as
        ``to_perfetto`` makes its parts; here the parts' definitions are unified,
        written with a mapping table per location from the part's ids to the
        archive's (OTF2's, as Score-P writes it: readers apply them), and the
        parts' event files moved into the archive.  The archive is the same with
        a client or without."""
        self._export(path, "otf2", client)


def open_dataset(path: str | os.PathLike) -> Dataset:
    """The dataset at ``path`` (a directory of ``pid=N/*.parquet`` partitions: ``ompt-py
    run -o DIR/``, ``Trace.save(DIR)``), opened lazily: only the partitions'
    footers are read.  What ``ompt_py.load(path)`` would leave out is left out and
    said with a TraceWarning (files that cannot be read, the parts of another MPI
    job, ranks missing); TraceFileError when no partition can be read."""
    return Dataset(path)


