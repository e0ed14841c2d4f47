"""The torch operators on the emulator, one process (ctest torch_emu): every collective and fused
operator against ref/ bit for bit on 1 to 4 ranks, errors, and the failure handling of
fusedcoll.run (a failing rank never leaves the others waiting)."""

import os
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
import fusedcoll  # noqa: E402

WORLD_SIZES = (1, 2, 3, 4)


class BitExact(unittest.TestCase):
    def run_case(self, case, compute_units=1):
        for size in WORLD_SIZES:
            with self.subTest(world_size=size):
                fusedcoll.run(lambda r: case(r, size), world_size=size,
                              compute_units=compute_units)

    def test_all_reduce(self):
        self.run_case(cases.case_all_reduce)

    def test_all_reduce_chain_wire(self):
        self.run_case(cases.case_all_reduce_chain_wire)

    def test_all_to_all(self):
        self.run_case(cases.case_all_to_all)

    def test_reduce_scatter(self):
        self.run_case(cases.case_reduce_scatter)

    def test_all_gather(self):
        self.run_case(cases.case_all_gather)

    def test_broadcast(self):
        self.run_case(cases.case_broadcast)

    def test_gemv_allreduce(self):
        self.run_case(cases.case_gemv, compute_units=2)

    def test_embedding_alltoall(self):
        self.run_case(cases.case_embedding, compute_units=2)

    def test_gemm_alltoall(self):
        self.run_case(cases.case_gemm, compute_units=2)

    def test_fuzzed_schedules(self):
        # Random workgroup order and delays: the bits must not move.
        for seed in (1, 2):
            fusedcoll.run(lambda r: cases.case_gemv(r, 3), world_size=3, compute_units=2,
                          fuzz_seed=seed)


class Errors(unittest.TestCase):
    def test_every_rank_raises_with_fusedcolls_message(self):
        for size in (1, 2, 3):
            with self.subTest(world_size=size):
                fusedcoll.run(lambda r: cases.case_errors(r, size), world_size=size,
                              compute_units=1)

    def test_calls_outside_a_run_are_not_initialised(self):
        self.assertEqual(fusedcoll.backend(), "none")
        for call in (lambda: fusedcoll.all_reduce(torch.ones(2)), fusedcoll.rank, fusedcoll.size,
                     fusedcoll.barrier,
                     lambda: torch.ops.fusedcoll.broadcast(torch.ones(2))):
            with self.assertRaises(RuntimeError) as ctx:
                call()
            self.assertIn("not initialised", str(ctx.exception))
        with self.assertRaises(fusedcoll.NotInitializedError):
            fusedcoll.all_reduce(torch.ones(2))

    def test_raw_operators_raise_the_builtin_exceptions(self):
        # torch.ops.fusedcoll.* raise what PyTorch makes of the C++ error, with the tag.
        def body(rank):
            with self.assertRaises(ValueError) as ctx:
                torch.ops.fusedcoll.all_reduce(torch.ones(2 + rank))
            self.assertTrue(str(ctx.exception).startswith("fusedcoll invalid_argument: "))
            with self.assertRaises(TypeError):
                torch.ops.fusedcoll.all_reduce(torch.ones(2, dtype=torch.float64))
        fusedcoll.run(body, world_size=2, compute_units=1)

    def test_a_python_exception_on_one_rank_ends_the_run(self):
        def body(rank):
            if rank == 1:
                raise KeyError("rank 1 gives up")
            fusedcoll.all_reduce(torch.ones(3))  # rank 1 never joins: aborted, not timed out
        start = time.monotonic()
        with self.assertRaises(KeyError) as ctx:
            fusedcoll.run(body, world_size=3, compute_units=1, timeout=60)
        self.assertIn("rank 1 gives up", str(ctx.exception))
        self.assertLess(time.monotonic() - start, 30)

    def test_a_failing_call_on_one_rank_aborts_the_others(self):
        def body(rank):
            x = torch.ones(3, dtype=torch.float32 if rank else torch.float64)
            fusedcoll.all_reduce(x)  # rank 0: TypeError before it joins
        start = time.monotonic()
        with self.assertRaises(TypeError):
            fusedcoll.run(body, world_size=2, compute_units=1, timeout=60)
        self.assertLess(time.monotonic() - start, 30)

    def test_a_missing_rank_times_out_with_a_report(self):
        def body(rank):
            if rank != 0:
                fusedcoll.all_reduce(torch.ones(3))
        with self.assertRaises(fusedcoll.TimeoutError) as ctx:
            fusedcoll.run(body, world_size=2, compute_units=1, timeout=1)
        self.assertIsInstance(ctx.exception, TimeoutError)  # the built-in class too
        self.assertIn("rank", str(ctx.exception))

    def test_a_broken_run_leaves_the_next_one_working(self):
        with self.assertRaises(KeyError):
            fusedcoll.run(lambda r: {}[r], world_size=2, compute_units=1)
        out = fusedcoll.run(lambda r: fusedcoll.all_reduce(torch.ones(2)), world_size=2,
                            compute_units=1)
        self.assertTrue(torch.equal(out[0], torch.full((2,), 2.0)))

    def test_run_arguments(self):
        with self.assertRaises(fusedcoll.InvalidArgument):
            fusedcoll.run(lambda r: None, world_size=0)
        with self.assertRaises(TypeError):
            fusedcoll.run(lambda r: None, world_size=2, computeunits=1)
        with self.assertRaises(fusedcoll.InvalidArgument):
            fusedcoll.init("nccl")

    def test_run_returns_results_and_answers_rank_and_size(self):
        out = fusedcoll.run(lambda r: (r, fusedcoll.rank(), fusedcoll.size(), fusedcoll.backend()),
                            world_size=3, compute_units=1)
        self.assertEqual(out, [(r, r, 3, "emu") for r in range(3)])

    def test_init_emu_sets_the_defaults_of_run(self):
        fusedcoll.init("emu", world_size=2, compute_units=1)
        try:
            self.assertEqual(fusedcoll.run(lambda r: fusedcoll.size()), [2, 2])
        finally:
            fusedcoll.init("emu", world_size=4, compute_units=4)


if __name__ == "__main__":
    unittest.main()
