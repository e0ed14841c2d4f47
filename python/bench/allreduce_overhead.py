"""What the torch binding adds to an AllReduce (docs/results/pytorch.md): under
mpiexec, the raw operator ``torch.ops.fusedcoll.all_reduce.out(x, out=y)`` (f32 sum, direct) and
the package's ``fusedcoll.all_reduce(x, out=y)`` against the same ``fusedcoll::all_reduce`` called
from C++ (``_bench_all_reduce_cpp``: a C++ loop on the same communicator and buffers).

Each round runs the variants in an order shuffled alike on every rank; a sample is a barrier,
then ``calls`` back-to-back calls timed on each rank, per call. Rank 0 prints the medians over the
rounds of the slowest rank's samples, and the ratios to C++.

    fusedcoll-run -np 2 python python/bench/allreduce_overhead.py [--sizes 4K,64M] [--rounds N]

with the package installed (docs/pytorch.md, "Install": ``python3 -m pip install .``), or with
``PYTHONPATH=build/python`` and ``/usr/bin/python3`` from a build tree.
"""

import argparse
import random
import statistics
import time

import torch

import fusedcoll


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4K,64M")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    fusedcoll.init()
    rank, size = fusedcoll.rank(), fusedcoll.size()
    raw = torch.ops.fusedcoll.all_reduce.out
    if rank == 0:
        print(f"# {size} ranks; median per call over {args.rounds} rounds (slowest rank)")
        print("| bytes | calls per sample | C++ (us) | torch.ops.fusedcoll.all_reduce.out (us) | "
              "ratio | fusedcoll.all_reduce (us) | ratio |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for text in args.sizes.split(","):
        nbytes = parse_size(text)
        n = nbytes // 4
        x = torch.empty(n).uniform_(-1, 1)
        y = torch.empty(n)
        calls = max(1, min(200, (1 << 22) // max(nbytes, 1)))

        def cpp():
            return torch.ops.fusedcoll._bench_all_reduce_cpp(x, y, calls)

        def op():
            t0 = time.perf_counter()
            for _ in range(calls):
                raw(x, out=y)
            return time.perf_counter() - t0

        def package():
            t0 = time.perf_counter()
            for _ in range(calls):
                fusedcoll.all_reduce(x, out=y)
            return time.perf_counter() - t0

        variants = [cpp, op, package]
        samples = [[] for _ in variants]
        rng = random.Random(1234)
        for r in range(args.warmup + args.rounds):
            order = list(range(len(variants)))
            rng.shuffle(order)
            for i in order:
                fusedcoll.barrier()
                t = variants[i]() / calls
                slowest = fusedcoll.all_reduce(torch.tensor([t], dtype=torch.float32), "max")
                if r >= args.warmup:
                    samples[i].append(slowest.item())
        med = [statistics.median(s) * 1e6 for s in samples]
        if rank == 0:
            print(f"| {nbytes} | {calls} | {med[0]:.1f} | {med[1]:.1f} | {med[1] / med[0]:.3f} | "
                  f"{med[2]:.1f} | {med[2] / med[0]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
