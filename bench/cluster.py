"""The Dask cluster the dataset benchmarks start: a LocalCluster of worker
processes of one thread each, no memory limit, no dashboard, and Dask's
statistical profiler on or off in its workers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: Dask's setting (distributed.yaml) that starts each worker's statistical
#: profiler: a sample of every worker thread's stack each 10 ms, kept per
#: second and sent to the scheduler (28 to 31 MiB held per worker).
PROFILER = "distributed.worker.profile.enabled"


@contextlib.contextmanager
def local_client(workers: int, profiler: bool = True) -> Iterator[Any]:
    """A Client of a fresh LocalCluster of ``workers`` processes; the workers
    take the setting from the dask.config their nanny is made in."""
    import dask
    from dask.distributed import Client, LocalCluster

    with dask.config.set({PROFILER: profiler}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         memory_limit=0, dashboard_address=":0",
                         scheduler_kwargs={"dashboard": False}) as cluster, \
            Client(cluster) as client:
        yield client
