"""Faults under mpiexec (ctest torch_mpi_fault_*): whatever goes wrong on one rank, the job ends
within the timeout with that rank's message, as fusedcoll::mpi::run guarantees for C++.

usage: mpi_faults.py raise | missing | mismatch"""

import sys
import time

import torch

import fusedcoll

fault = sys.argv[1]
fusedcoll.init()
rank = fusedcoll.rank()
fusedcoll.all_reduce(torch.ones(4))  # a good call first

if fault == "raise":
    # An uncaught Python exception on rank 1: it aborts the job; rank 0 does not wait for it.
    if rank == 1:
        raise RuntimeError("injected failure on rank 1")
    fusedcoll.all_reduce(torch.ones(4))
elif fault == "missing":
    # Rank 1 never makes the call: the others' wait ends with fusedcoll's TimeoutError,
    # uncaught, which aborts the job (rank 1 included) long before this sleep ends.
    if rank != 1:
        fusedcoll.all_reduce(torch.ones(4))
    else:
        time.sleep(120)
elif fault == "mismatch":
    # Shapes differ across ranks: every rank raises fusedcoll's InvalidArgument, uncaught.
    fusedcoll.all_reduce(torch.ones(4 + rank))
else:
    sys.exit(f"mpi_faults.py: unknown fault {fault!r}")
