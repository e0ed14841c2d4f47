"""The torch operators under mpiexec, one rank per process (ctest torch_mpi_np2, _np3): the same
bit-exact cases and error cases as the emulator suite (cases.py), on the MPI backend.

Every rank runs the same tests in the same order; rank 0 prints the unittest report, and a rank
with a failure prints its own and exits non-zero, which fails the job."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
import fusedcoll  # noqa: E402

fusedcoll.init()
RANK, SIZE = fusedcoll.rank(), fusedcoll.size()


class MpiBitExact(unittest.TestCase):
    def test_all_reduce(self):
        cases.case_all_reduce(RANK, SIZE)

    def test_all_reduce_chain_wire(self):
        cases.case_all_reduce_chain_wire(RANK, SIZE)

    def test_all_to_all(self):
        cases.case_all_to_all(RANK, SIZE)

    def test_reduce_scatter(self):
        cases.case_reduce_scatter(RANK, SIZE)

    def test_all_gather(self):
        cases.case_all_gather(RANK, SIZE)

    def test_broadcast(self):
        cases.case_broadcast(RANK, SIZE)

    def test_gemv_allreduce(self):
        cases.case_gemv(RANK, SIZE)

    def test_embedding_alltoall(self):
        cases.case_embedding(RANK, SIZE)

    def test_gemm_alltoall(self):
        cases.case_gemm(RANK, SIZE)


class MpiSession(unittest.TestCase):
    def test_errors_on_every_rank_and_the_communicator_stays_usable(self):
        cases.case_errors(RANK, SIZE)

    def test_rank_size_backend(self):
        self.assertEqual(fusedcoll.backend(), "mpi")
        self.assertTrue(fusedcoll.is_initialized())
        ranks = fusedcoll.all_gather(torch.tensor([RANK]))
        self.assertEqual(ranks.tolist(), list(range(SIZE)))
        fusedcoll.init()  # again: a no-op
        self.assertEqual(fusedcoll.rank(), RANK)

    def test_run_on_mpi_calls_fn_with_this_rank(self):
        out = fusedcoll.run(lambda r: (r, fusedcoll.all_reduce(torch.ones(1)).item()))
        self.assertEqual(out[RANK], (RANK, float(SIZE)))
        self.assertEqual(sum(o is None for o in out), SIZE - 1)

    def test_an_emulated_run_inside_an_mpi_process(self):
        # run(world_size=...) is the emulator even after init("mpi"): its threads are its ranks.
        out = fusedcoll.run(lambda r: fusedcoll.all_reduce(torch.ones(2)).tolist(), world_size=2,
                            compute_units=1)
        self.assertEqual(out, [[2.0, 2.0], [2.0, 2.0]])


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    if not cases.run_rank_suite(suite, RANK):
        sys.exit(1)
