"""examples/torch_mnist.py end to end (ctest torch_mnist_np2): writes small digit-like IDX files
(a class-specific bar on noise, as tests/mnist_train_test.cpp does), then trains 20 steps with
2 processes under mpiexec, twice, with FP8 E4M3 and error feedback: both ranks end with
bit-identical parameters, the rerun with the same bits, and the test accuracy beats chance.

usage: mnist_smoke.py MPIEXEC [MPIEXEC_ARGS...]"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "examples", "torch_mnist.py")


def write_idx(path, array):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, array.ndim]))
        for d in array.shape:
            f.write(int(d).to_bytes(4, "big"))
        f.write(array.astype(np.uint8).tobytes())


def digits(n, rng):
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 60, (n, 28, 28))
    for i, c in enumerate(labels):
        row = 2 + 2 * c + rng.integers(0, 2)
        images[i, row:row + 3, 4:24] = 255
    return images, labels


def main():
    mpiexec = sys.argv[1:]
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        for split, n in (("train", 2560), ("t10k", 500)):
            images, labels = digits(n, rng)
            write_idx(os.path.join(tmp, f"{split}-images-idx3-ubyte"), images)
            write_idx(os.path.join(tmp, f"{split}-labels-idx1-ubyte"), labels)
        runs = []
        for attempt in range(2):
            out = os.path.join(tmp, f"params{attempt}")
            report = os.path.join(tmp, f"run{attempt}.json")
            cmd = mpiexec + ["2", sys.executable, SCRIPT, "--data-dir", tmp, "--epochs", "1",
                             "--max-steps", "20", "--lr", "0.05", "--compress", "fp8-e4m3",
                             "--error-feedback", "--save-params", out, "--json", report]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            if proc.returncode != 0:
                sys.exit(f"mnist_smoke: {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stdout}\n{proc.stderr}")
            ranks = [torch.load(f"{out}.{r}") for r in range(2)]
            for name in ranks[0]:
                if not torch.equal(ranks[0][name].view(torch.int32),
                                   ranks[1][name].view(torch.int32)):
                    sys.exit(f"mnist_smoke: rank 1's {name} differs from rank 0's")
            with open(report) as f:
                runs.append((ranks[0], json.load(f)))
            print(proc.stdout.strip())
        (first, r0), (second, r1) = runs
        for name in first:
            if not torch.equal(first[name].view(torch.int32), second[name].view(torch.int32)):
                sys.exit(f"mnist_smoke: the rerun's {name} differs")
        accuracy = r0["per_epoch"][-1]["test_accuracy"]
        if r0["per_epoch"][0]["steps"] != 20 or accuracy < 0.3:
            sys.exit(f"mnist_smoke: 20 steps expected, accuracy {accuracy} not above chance")
        figures = [[(e["test_loss"], e["test_accuracy"], e["train_loss_mean"])
                    for e in r["per_epoch"]] for r in (r0, r1)]
        if figures[0] != figures[1]:
            sys.exit(f"mnist_smoke: the rerun's losses differ: {figures}")
        print(f"mnist_smoke: ok, bit-identical ranks and rerun, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
