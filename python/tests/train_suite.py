"""fusedcoll.torch, the Horovod-compatible training API, under mpiexec (ctest torch_train_np2):
20 seeded steps leave bit-identical parameters on every rank and again on a rerun, and the same
bits as the same training on the emulator; FP8 with error feedback learns; a lab-style
user-written compressor works; the compressors alone; broadcasts; errors on every rank."""

import os
import sys
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import cases
import fusedcoll
import fusedcoll.torch as hvd

hvd.init()
torch.set_num_threads(1)
RANK, SIZE = hvd.rank(), hvd.size()
STEPS, BATCH, FEATURES, CLASSES = 20, 32, 16, 4


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def make_data(rank, seed=5):
    """Separable clusters (the same centres on every rank), each rank its own samples."""
    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(seed)) * 1.5
    g = torch.Generator().manual_seed(1000 * seed + rank + 1)
    labels = torch.randint(0, CLASSES, (STEPS * BATCH,), generator=g)
    return centres[labels] + torch.randn(STEPS * BATCH, FEATURES, generator=g), labels


def run_steps(model, opt, x, y):
    """STEPS steps of cross-entropy SGD over the rank's batches; returns the per-step losses."""
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train(model, rank, compression=hvd.Compression.none, error_feedback=False):
    """20 steps of the Horovod recipe; returns (flat parameters, per-step losses, optimizer)."""
    x, y = make_data(rank)
    base = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(base, root_rank=0)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                   compression=compression, error_feedback=error_feedback)
    losses = run_steps(model, opt, x, y)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return flat, losses, opt


def bits(t):
    return t.contiguous().view(torch.int32)


def assert_same_on_every_rank(test, flat):
    rows = fusedcoll.all_gather(bits(flat).unsqueeze(0))
    for r in range(SIZE):
        test.assertTrue(torch.equal(rows[r], rows[0]), f"rank {r}'s parameters differ from rank 0's")


class Bit16Lab:
    """The course lab's step 3: a user-written compressor with Horovod's signatures (NumPy)."""

    @staticmethod
    def compress(tensor):
        return torch.from_numpy(tensor.numpy().astype(np.float16)), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return torch.from_numpy(tensor.numpy().astype(np.float32)).to(ctx)


CONFIGS = [("none", hvd.Compression.none, False), ("fp16", hvd.Compression.fp16, False),
           ("bf16", hvd.Compression.bf16, False), ("fp8_e4m3+ef", hvd.Compression.fp8_e4m3, True),
           ("fp8_e5m2", hvd.Compression.fp8_e5m2, False), ("lab-bit16", Bit16Lab, False)]


class Training(unittest.TestCase):
    def test_bit_identical_on_every_rank_and_across_reruns(self):
        for name, compression, ef in CONFIGS:
            with self.subTest(compression=name):
                # Each rank starts from other weights: broadcast_parameters must align them.
                first, losses, _ = train(make_model(100 + RANK), RANK, compression, ef)
                assert_same_on_every_rank(self, first)
                again, losses2, _ = train(make_model(100 + RANK), RANK, compression, ef)
                self.assertTrue(torch.equal(bits(first), bits(again)), "a rerun differs")
                self.assertEqual(losses, losses2)
                self.assertTrue(torch.isfinite(first).all())

    def test_same_bits_as_the_emulator(self):
        # The same training with the ranks as threads of fusedcoll.run: MPI and the emulator
        # reduce bit for bit as ref/, so the parameters agree exactly.
        for name, compression, ef in CONFIGS[:4]:
            with self.subTest(compression=name):
                mine, _, _ = train(make_model(100 + RANK), RANK, compression, ef)
                models = [make_model(100 + r) for r in range(SIZE)]  # seeded here, not in threads
                emulated = fusedcoll.run(
                    lambda r: train(models[r], r, compression, ef)[0], world_size=SIZE,
                    compute_units=1)
                for r in range(SIZE):
                    self.assertTrue(torch.equal(bits(emulated[r]), bits(mine)),
                                    f"emulated rank {r} differs from MPI rank {RANK}")

    def test_fp8_with_error_feedback_learns(self):
        for compression in (hvd.Compression.fp8_e4m3, hvd.Compression.fp8_e5m2):
            with self.subTest(compression=compression.__name__):
                _, losses, opt = train(make_model(7), RANK, compression, True)
                first, last = np.mean(losses[:3]), np.mean(losses[-3:])
                self.assertLess(last, 0.5 * first, f"loss {first:.3f} -> {last:.3f}")
                residual = opt._fc_feedback.residual
                self.assertTrue(torch.isfinite(residual).all())
                self.assertGreater(residual.abs().max().item(), 0.0)

    def test_error_feedback_changes_the_trajectory_and_tracks_f32(self):
        # Error feedback is active (other bits than without) and ends nearer the f32 result.
        ref, _, _ = train(make_model(9), RANK, hvd.Compression.none)
        plain, _, _ = train(make_model(9), RANK, hvd.Compression.fp8_e5m2, False)
        fed, _, _ = train(make_model(9), RANK, hvd.Compression.fp8_e5m2, True)
        self.assertFalse(torch.equal(bits(plain), bits(fed)))
        self.assertLess((fed - ref).norm().item(), (plain - ref).norm().item() * 1.5)


class Api(unittest.TestCase):
    def test_allreduce_average_and_sum(self):
        x = torch.tensor([float(RANK), 1.0])
        self.assertEqual(hvd.allreduce(x, name="m").tolist(), [(SIZE - 1) / 2, 1.0])
        self.assertEqual(hvd.allreduce(x, op=hvd.Sum).tolist(), [SIZE * (SIZE - 1) / 2, SIZE])
        self.assertEqual(x.tolist(), [float(RANK), 1.0])  # out of place
        self.assertEqual(hvd.allgather(torch.tensor([RANK])).tolist(), list(range(SIZE)))
        self.assertEqual(hvd.broadcast(torch.tensor([RANK]), 1).tolist(), [1])
        self.assertEqual(hvd.local_rank(), RANK)
        self.assertEqual(hvd.local_size(), SIZE)

    def test_compressors_alone(self):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(1000, generator=g) * 1e-3
        p, ctx = hvd.Compression.fp16.compress(x)
        self.assertEqual(p.dtype, torch.float16)
        self.assertTrue(torch.equal(p.view(torch.int16), x.half().view(torch.int16)))
        self.assertTrue(torch.equal(hvd.Compression.fp16.decompress(p, ctx), p.float()))
        p, ctx = hvd.Compression.bf16.compress(x)
        self.assertTrue(torch.equal(p.view(torch.int16), x.bfloat16().view(torch.int16)))
        for c in (hvd.Compression.fp8_e4m3, hvd.Compression.fp8_e5m2):
            p, ctx = c.compress(x.reshape(10, 100))
            self.assertEqual((p.dtype, tuple(p.shape)), (torch.uint8, (10, 100)))
            back = c.decompress(p, ctx).reshape(-1)
            rel = 2.0 ** (-3 if c is hvd.Compression.fp8_e4m3 else -2)
            self.assertLessEqual((back - x).abs().max().item(), rel * x.abs().max().item())
            scale = fusedcoll.scale_for(c.wire, x.abs().max().item())
            self.assertTrue(torch.equal(p.reshape(-1), fusedcoll.encode(x, c.wire, scale)))
        p, ctx = hvd.Compression.none.compress(x)
        self.assertIs(hvd.Compression.none.decompress(p, ctx), x)

    def test_synchronize_then_step_without_a_second_exchange(self):
        # Horovod's pattern for clipping: synchronize(), change the averaged gradients, then
        # step() inside skip_synchronize() must not exchange (with op=Sum a second exchange
        # would multiply them by P again).
        w = nn.Parameter(torch.zeros(3))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), op=hvd.Sum)
        w.grad = torch.full((3,), float(RANK + 1))
        opt.synchronize()
        total = SIZE * (SIZE + 1) / 2
        self.assertEqual(w.grad.tolist(), [total] * 3)
        with opt.skip_synchronize():
            opt.step()
        self.assertEqual(w.detach().tolist(), [-total] * 3)
        opt.step()  # outside: exchanges again
        self.assertEqual(w.detach().tolist(), [-total - SIZE * total] * 3)

    def test_broadcast_optimizer_state(self):
        model = make_model(11)
        opt = torch.optim.SGD(model.parameters(), lr=0.1 + RANK, momentum=0.5)
        model(torch.ones(2, FEATURES)).sum().backward()
        opt.step()
        for state in opt.state.values():
            state["momentum_buffer"].fill_(float(RANK))
        hvd.broadcast_optimizer_state(opt, root_rank=SIZE - 1)
        self.assertEqual(opt.param_groups[0]["lr"], 0.1 + SIZE - 1)
        for state in opt.state.values():
            self.assertTrue((state["momentum_buffer"] == SIZE - 1).all())


class Errors(unittest.TestCase):
    def test_bad_arguments(self):
        model = make_model(1)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "error_feedback needs"):
            hvd.DistributedOptimizer(sgd, error_feedback=True)
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "op must be Average or Sum"):
            hvd.DistributedOptimizer(sgd, op="max")
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "more than once"):
            hvd.DistributedOptimizer(sgd, named_parameters=[("a", p) for p in model.parameters()])
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "not in named_parameters"):
            hvd.DistributedOptimizer(sgd, named_parameters=list(model.named_parameters())[:1])
        double = nn.Linear(2, 2).double()
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "float32 CPU tensors"):
            hvd.DistributedOptimizer(torch.optim.SGD(double.parameters(), lr=0.1))
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "needs a float32 tensor"):
            hvd.Compression.fp16.compress(torch.ones(3, dtype=torch.float64))
        with self.assertRaisesRegex(ValueError, "contiguous"):
            hvd.allreduce_(torch.ones(4, 4).t())

    def test_shapes_that_differ_across_ranks_fail_on_every_rank(self):
        # Rank 0's model is wider: the broadcast of its first weight fails on every rank, with
        # fusedcoll's message, and the communicator stays usable.
        torch.manual_seed(0)
        model = nn.Linear(FEATURES, 3 if RANK == 0 else 2)
        with self.assertRaises(fusedcoll.InvalidArgument) as caught:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.assertIn("rank", str(caught.exception))
        self.assertEqual(hvd.allreduce(torch.ones(1), op=hvd.Sum).item(), float(SIZE))

    def test_optimizer_state_of_another_structure(self):
        model = make_model(1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if RANK == 0:
            model(torch.ones(1, FEATURES)).sum().backward()
            opt.step()
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "another structure"):
            hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.assertEqual(hvd.allreduce(torch.ones(1), op=hvd.Sum).item(), float(SIZE))


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    if not cases.run_rank_suite(suite, RANK):
        sys.exit(1)
