"""fusedcoll.torch.ddp_comm_hook under mpiexec -n 2 (ctest torch_ddp_np2): DistributedDataParallel
with fusedcoll's AllReduce as its communication hook. f32, fp16 and bf16 wires are element-wise,
so DDP's buckets end with the same bits as DistributedOptimizer's one flat buffer: 20 seeded steps
give bit-identical parameters to it; FP8 with error feedback per bucket learns, ranks identical."""

import os
import socket
import sys
import unittest

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
import fusedcoll  # noqa: E402
import fusedcoll.torch as hvd  # noqa: E402
from train_suite import STEPS, bits, make_data, make_model, run_steps, train  # noqa: E402

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def free_port():
    port = torch.zeros(1, dtype=torch.int64)
    if RANK == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    return int(hvd.broadcast(port, 0).item())


dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=RANK,
                        world_size=SIZE)


CALLS = [0]


def counting_hook(state, bucket):
    CALLS[0] += 1
    return hvd.ddp_comm_hook(state, bucket)


def train_ddp(seed, compression, error_feedback):
    model = DistributedDataParallel(make_model(seed + RANK))  # DDP copies rank 0's weights
    model.register_comm_hook(hvd.DDPHookState(compression, error_feedback), counting_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * SIZE, momentum=0.5)
    x, y = make_data(RANK)
    losses = run_steps(model, opt, x, y)
    return torch.cat([p.detach().reshape(-1) for p in model.module.parameters()]), losses


class Ddp(unittest.TestCase):
    def test_same_bits_as_distributed_optimizer(self):
        for compression in (hvd.Compression.none, hvd.Compression.fp16, hvd.Compression.bf16):
            with self.subTest(compression=compression.__name__):
                calls = CALLS[0]
                mine, _ = train_ddp(100, compression, False)
                self.assertGreaterEqual(CALLS[0] - calls, STEPS)  # the hook ran every step
                ref, _, _ = train(make_model(100 + RANK), RANK, compression)
                self.assertTrue(torch.equal(bits(mine), bits(ref)))

    def test_fp8_with_error_feedback_learns_and_ranks_agree(self):
        flat, losses = train_ddp(7, hvd.Compression.fp8_e4m3, True)
        self.assertLess(np.mean(losses[-3:]), 0.5 * np.mean(losses[:3]))
        rows = fusedcoll.all_gather(bits(flat).unsqueeze(0))
        self.assertTrue(torch.equal(rows[0], rows[1]))

    def test_bad_state(self):
        with self.assertRaises(fusedcoll.UnsupportedError):
            hvd.DDPHookState(compression=type("Mine", (), {}))
        with self.assertRaisesRegex(fusedcoll.InvalidArgument, "error_feedback needs"):
            hvd.DDPHookState(error_feedback=True)


if __name__ == "__main__":
    passed = cases.run_rank_suite(unittest.defaultTestLoader.loadTestsFromTestCase(Ddp), RANK)
    dist.destroy_process_group()
    if not passed:
        sys.exit(1)
