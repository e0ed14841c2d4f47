"""The course lab's MNIST in PyTorch, data-parallel on fusedcoll (docs/pytorch.md, "The lab").

Horovod 0.19.4's examples/pytorch_mnist.py (network, SGD with momentum, lr x size, the
DistributedSampler split, broadcast of the initial state, the averaged test metrics) with
``import horovod.torch as hvd`` replaced by ``import fusedcoll.torch as hvd``. Two changes that
are not about Horovod: the data come from scripts/get-mnist's IDX files (read here with NumPy, no
torchvision, no download), and batches are sliced from tensors in memory instead of going
through a DataLoader (the same samples in the same order as DistributedSampler gives them).

    fusedcoll-run -np 2 python examples/torch_mnist.py --compress fp16
    python examples/torch_mnist.py                                  # serial: a world of one

with ``python`` and ``fusedcoll-run`` from the virtual environment of docs/pytorch.md, "Install"
(``python3 -m pip install .``); without one, the build tree's package is used (below).

``--comm gloo`` exchanges the same flat gradient with torch.distributed's Gloo AllReduce instead
(the baseline of docs/results/pytorch.md; ranks from Open MPI's environment, rendezvous on 127.0.0.1).
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data.distributed import DistributedSampler

COMPRESSIONS = ("none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2")


def import_fusedcoll_torch():
    """``fusedcoll.torch`` installed (``pip install .``) or on PYTHONPATH, else from the build
    tree ``build/python`` next to this checkout (``cmake --build build --target fusedcoll_torch``)."""
    try:
        import fusedcoll.torch as hvd
    except ImportError:
        build = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python")
        if not os.path.isdir(os.path.join(build, "fusedcoll")):
            raise
        sys.path.insert(0, os.path.normpath(build))
        import fusedcoll.torch as hvd
    return hvd


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="MNIST data-parallel training on fusedcoll")
    p.add_argument("--batch-size", type=int, default=64, help="per worker (default 64)")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01, help="per worker; the step uses lr x size")
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default="data/mnist", help="scripts/get-mnist's output")
    p.add_argument("--compress", choices=COMPRESSIONS, default="none",
                   help="gradient wire format (fusedcoll.torch.Compression)")
    p.add_argument("--error-feedback", action="store_true",
                   help="add what the wire lost of the previous gradient to the next one")
    p.add_argument("--algo", choices=("direct", "ring", "chain"), default="direct")
    p.add_argument("--comm", choices=("fusedcoll", "gloo"), default="fusedcoll",
                   help="who averages the flat gradient (gloo: torch.distributed)")
    p.add_argument("--gloo-port", type=int, default=29533)
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop each epoch after this many steps (0: the whole epoch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--log-interval", type=int, default=0, help="steps between loss lines")
    p.add_argument("--json", default="", help="rank 0 writes the run's figures here")
    p.add_argument("--save-params", default="",
                   help="every rank writes its final parameters to FILE.<rank> (tests)")
    return p.parse_args(argv)


# --- Data: scripts/get-mnist's IDX files ------------------------------------------------------

def read_idx(path):
    """One IDX file (raw, or .gz if the raw file is absent) as a NumPy array of uint8."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        sys.exit(f"torch_mnist: {path} not found (run scripts/get-mnist)")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        sys.exit(f"torch_mnist: {path}: not an IDX file of unsigned bytes (magic {data[:4].hex()})")
    ndims = data[3]
    header = 4 + 4 * ndims
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    if len(data) != header + int(np.prod(dims)):
        sys.exit(f"torch_mnist: {path}: {len(data) - header} payload bytes for dimensions {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != (images.shape[0],):
        sys.exit(f"torch_mnist: {data_dir}: {split} images {images.shape}, labels {labels.shape}")
    # transforms.ToTensor() and Normalize((0.1307,), (0.3081,)), as the lab's script.
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.1307) / 0.3081
    return x.contiguous(), torch.from_numpy(labels.astype(np.int64))


# --- Horovod's network -------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


# --- The baseline: the same flat-gradient exchange on torch.distributed (Gloo) -----------------

class GlooComm:
    """What fusedcoll.torch does, on torch.distributed's Gloo AllReduce."""

    def __init__(self, port):
        import torch.distributed as dist
        self.dist = dist
        env = os.environ
        r = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", "0")))
        n = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(port))
        dist.init_process_group("gloo", rank=r, world_size=n)

    def rank(self):
        return self.dist.get_rank()

    def size(self):
        return self.dist.get_world_size()

    def broadcast_parameters(self, state_dict, root_rank=0):
        for _, t in sorted(state_dict.items()):
            self.dist.broadcast(t, root_rank)

    def allreduce(self, tensor, name=None):
        t = tensor.detach().clone()
        self.dist.all_reduce(t)
        return t.div_(self.size())

    def DistributedOptimizer(self, optimizer, named_parameters=None):
        comm = self
        flat_holder = [None]
        base_step = optimizer.step

        def step(closure=None):
            params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
            total = sum(p.numel() for p in params)
            if flat_holder[0] is None:
                flat_holder[0] = torch.empty(total)
            flat, offset, views = flat_holder[0], 0, []
            with torch.no_grad():
                for p in params:
                    view = flat[offset:offset + p.numel()]
                    offset += p.numel()
                    view.copy_(p.grad.reshape(-1))
                    views.append(view)
                comm.dist.all_reduce(flat)
                flat.div_(comm.size())
                for p, view in zip(params, views):
                    p.grad.copy_(view.reshape(p.shape))
            return base_step(closure)

        optimizer.step = step
        return optimizer


def main(argv=None):
    args = parse_args(argv)
    if args.comm == "gloo":
        if args.compress != "none" or args.error_feedback:
            sys.exit("torch_mnist: --comm gloo exchanges float32 only")
        hvd = GlooComm(args.gloo_port)
    else:
        hvd = import_fusedcoll_torch()
        hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rank, size = hvd.rank(), hvd.size()

    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "test")
    train_sampler = DistributedSampler(range(len(train_y)), num_replicas=size, rank=rank,
                                       shuffle=True, seed=args.seed)
    test_sampler = DistributedSampler(range(len(test_y)), num_replicas=size, rank=rank,
                                      shuffle=False)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if args.comm == "fusedcoll":
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
                       "bf16": hvd.Compression.bf16, "fp8-e4m3": hvd.Compression.fp8_e4m3,
                       "fp8-e5m2": hvd.Compression.fp8_e5m2}[args.compress]
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression,
                                             error_feedback=args.error_feedback, algo=args.algo)
    else:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def train(epoch):
        model.train()
        train_sampler.set_epoch(epoch)
        order = torch.tensor(list(train_sampler), dtype=torch.int64)
        steps = (len(order) + args.batch_size - 1) // args.batch_size
        if args.max_steps:
            steps = min(steps, args.max_steps)
        losses = []
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            data, target = train_x[idx], train_y[idx]
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if args.log_interval and step % args.log_interval == 0 and rank == 0:
                print(f"train epoch {epoch} step {step}/{steps} loss {loss.item():.6f}",
                      flush=True)
        return steps, len(idx) if steps else 0, losses

    def metric_average(val, name):
        return hvd.allreduce(torch.tensor(val, dtype=torch.float32), name=name).item()

    def test():
        model.eval()
        idx = torch.tensor(list(test_sampler), dtype=torch.int64)
        loss, correct = 0.0, 0.0
        with torch.no_grad():
            for start in range(0, len(idx), args.test_batch_size):
                sel = idx[start:start + args.test_batch_size]
                output = model(test_x[sel])
                loss += F.nll_loss(output, test_y[sel], reduction="sum").item()
                correct += output.argmax(dim=1).eq(test_y[sel]).sum().item()
        loss /= len(idx)
        accuracy = correct / len(idx)
        return metric_average(loss, "avg_loss"), metric_average(accuracy, "avg_accuracy")

    epochs, train_time, samples = [], 0.0, 0
    start_wall = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        steps, _, losses = train(epoch)
        dt = time.perf_counter() - t0
        train_time += dt
        epoch_samples = min(steps * args.batch_size, len(train_sampler)) * size
        samples += epoch_samples
        test_loss, accuracy = test()
        row = dict(epoch=epoch, steps=steps, train_s=dt, samples_per_s=epoch_samples / dt,
                   train_loss_first=losses[0] if losses else None,
                   train_loss_last=losses[-1] if losses else None,
                   train_loss_mean=float(np.mean(losses)) if losses else None,
                   test_loss=test_loss, test_accuracy=accuracy)
        epochs.append(row)
        if rank == 0:
            print(f"epoch {epoch}: train {dt:.2f} s ({row['samples_per_s']:.0f} samples/s), "
                  f"train loss {row['train_loss_mean']:.4f}, test loss {test_loss:.4f}, "
                  f"accuracy {100 * accuracy:.2f}%", flush=True)
    wall = time.perf_counter() - start_wall
    if rank == 0:
        print(f"workers {size}, comm {args.comm}, compress {args.compress}"
              f"{' +error-feedback' if args.error_feedback else ''}: training time {train_time:.2f} s, "
              f"{samples / train_time:.0f} samples/s, final accuracy "
              f"{100 * epochs[-1]['test_accuracy']:.2f}%, wall {wall:.2f} s", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(workers=size, comm=args.comm, compress=args.compress,
                               error_feedback=args.error_feedback, algo=args.algo,
                               epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                               seed=args.seed, max_steps=args.max_steps, train_s=train_time,
                               samples_per_s=samples / train_time, wall_s=wall,
                               load_avg=os.getloadavg()[0], per_epoch=epochs), f, indent=1)
    if args.save_params:
        torch.save({k: v.clone() for k, v in model.state_dict().items()},
                   f"{args.save_params}.{rank}")


if __name__ == "__main__":
    main()
