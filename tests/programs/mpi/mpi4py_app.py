"""An mpi4py + OpenMP program for tests/live/test_mpi.py: each rank runs parallel
regions (ompt_work_ext, 2 threads) between barriers, an allreduce and a send from
rank 0 to rank 1 (16 doubles), STEPS times.  argv[1]: "traced" (ompt_py.mpi.start()
and ompt_py.mpi.traced(comm)) or "plain" (mpi4py as it is).  Prints "rank R of N:
total T"."""

import sys

import numpy as np
import ompt_work_ext as w
from mpi4py import MPI

import ompt_py

STEPS = 5

comm = MPI.COMM_WORLD
if sys.argv[1] == "traced":
    ompt_py.mpi.start()
    comm = ompt_py.mpi.traced(comm)
rank, size = comm.Get_rank(), comm.Get_size()
total = 0
for _ in range(STEPS):
    w.parallel(2)
    comm.Barrier()
    total += comm.allreduce(rank)
    buf = np.full(16, rank, np.float64)
    if rank == 0:
        comm.Send(buf, dest=1)
    elif rank == 1:
        comm.Recv(buf, source=0)
print(f"rank {rank} of {size}: total {total}")
