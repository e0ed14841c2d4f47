"""The course lab's table in PyTorch (docs/mnist.md, "The lab in PyTorch"): runs
examples/torch_mnist.py serially and under fusedcoll-run for every configuration of the lab (serial;
2 and 4 workers in f32, fp16 and fp8) and writes docs/results/mnist-torch/results.md plus the
raw figures (runs.json). ``--gloo-pairs N`` instead times N alternating pairs of 2-worker runs,
fusedcoll against torch.distributed's Gloo, and writes throughput.md.

    /usr/bin/python3 examples/torch_mnist_report.py --epochs 10 --lr 0.05
    /usr/bin/python3 examples/torch_mnist_report.py --gloo-pairs 5 --epochs 3 --lr 0.05

Extra arguments after ``--`` go to every torch_mnist.py run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "torch_mnist.py")

CONFIGS = [  # (label, workers, compress, error feedback)
    ("serial", 1, "none", False),
    ("2 workers, f32", 2, "none", False),
    ("4 workers, f32", 4, "none", False),
    ("2 workers, fp16", 2, "fp16", False),
    ("4 workers, fp16", 4, "fp16", False),
    ("2 workers, fp8-e4m3", 2, "fp8-e4m3", False),
    ("4 workers, fp8-e4m3", 4, "fp8-e4m3", False),
    ("2 workers, fp8-e5m2", 2, "fp8-e5m2", False),
    ("4 workers, fp8-e5m2", 4, "fp8-e5m2", False),
    ("2 workers, fp8-e4m3 + error feedback", 2, "fp8-e4m3", True),
    ("4 workers, fp8-e4m3 + error feedback", 4, "fp8-e4m3", True),
]


def command(workers, extra, python):
    cmd = [python, SCRIPT] + extra
    if workers == 1:
        return cmd
    # The checkout's launcher (docs/mpi.md): it adds --allow-run-as-root as root and
    # --oversubscribe where the workers outnumber the cores.
    return [sys.executable, os.path.join(ROOT, "launcher", "fusedcoll-run"), "-np",
            str(workers)] + cmd


def run(workers, extra, python):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = command(workers, extra + ["--json", out], python)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"torch_mnist_report: {' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    result["command"] = " ".join(cmd[cmd.index(SCRIPT) - 1:] if workers == 1 else cmd[1:])
    result["command"] = result["command"].replace(ROOT + "/", "").replace(" --json " + out, "")
    return result


def bytes_per_step(workers, compress, params=21840):
    if workers == 1:
        return 0
    size = {"none": 4, "fp16": 2, "bf16": 2}.get(compress, 1)
    # direct AllReduce, rank 0: every chunk but its own out, its own chunk to P-1 peers
    own = (params + workers - 1) // workers if workers else params
    return ((params - own) + own * (workers - 1)) * size


def lab_table(args, extra, python):
    os.makedirs(args.out, exist_ok=True)
    results = []
    for label, workers, compress, ef in CONFIGS:
        flags = extra + ["--compress", compress] + (["--error-feedback"] if ef else [])
        t0 = time.time()
        r = run(workers, flags, python)
        r["label"] = label
        results.append(r)
        print(f"{label}: {100 * r['per_epoch'][-1]['test_accuracy']:.2f}%, "
              f"training {r['train_s']:.1f} s ({time.time() - t0:.0f} s wall)", flush=True)
    with open(os.path.join(args.out, "runs.json"), "w") as f:
        json.dump(results, f, indent=1)
    first = results[0]
    lines = [
        "# The course lab's MNIST table in PyTorch on fusedcoll",
        "",
        "Written by `examples/torch_mnist_report.py` (docs/mnist.md, \"The lab in PyTorch\"): "
        "examples/torch_mnist.py (Horovod's pytorch_mnist.py with `import fusedcoll.torch as hvd`)"
        f", {first['epochs']} epochs, lr {first['lr']} x workers, batch {first['batch_size']} per "
        f"worker, momentum 0.5, seed {first['seed']}, scripts/get-mnist's data (8,000 training "
        "and 2,000 test digits), one torch thread per worker, every worker a process under "
        "mpiexec. Training time excludes the per-epoch test; the 1-minute load average at the "
        "end of each run is given because the machine's 2 hardware threads are shared.",
        "",
        "| configuration | test accuracy | training time (s) | samples/s | gradient bytes per "
        "step (rank 0) | load avg | command |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['label']} | {100 * r['per_epoch'][-1]['test_accuracy']:.2f}% | "
            f"{r['train_s']:.1f} | {r['samples_per_s']:.0f} | "
            f"{bytes_per_step(r['workers'], r['compress']):,} | {r['load_avg']:.1f} | "
            f"`{r['command']}` |")
    lines += ["", "Test accuracy per epoch (%):", "",
              "| configuration | " + " | ".join(str(e['epoch']) for e in first["per_epoch"]) + " |",
              "| --- |" + " ---: |" * len(first["per_epoch"])]
    for r in results:
        lines.append(f"| {r['label']} | " + " | ".join(
            f"{100 * e['test_accuracy']:.2f}" for e in r["per_epoch"]) + " |")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}/results.md")


def gloo_pairs(args, extra, python):
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for i in range(args.gloo_pairs):
        pair = {}
        order = ("fusedcoll", "gloo") if i % 2 == 0 else ("gloo", "fusedcoll")
        for comm in order:
            pair[comm] = run(2, extra + ["--comm", comm], python)
        rows.append(pair)
        print(f"pair {i}: fusedcoll {pair['fusedcoll']['samples_per_s']:.0f} samples/s, "
              f"gloo {pair['gloo']['samples_per_s']:.0f}", flush=True)
    fc = [p["fusedcoll"]["samples_per_s"] for p in rows]
    gl = [p["gloo"]["samples_per_s"] for p in rows]
    ratios = [p["gloo"]["samples_per_s"] / p["fusedcoll"]["samples_per_s"] for p in rows]
    acc = {c: rows[0][c]["per_epoch"][-1]["test_accuracy"] for c in ("fusedcoll", "gloo")}
    lines = [
        "# torch_mnist.py at 2 workers: fusedcoll vs torch.distributed (Gloo)",
        "",
        f"{args.gloo_pairs} alternating pairs; each run `{rows[0]['fusedcoll']['command']}` and "
        "the same with `--comm gloo` (the flat f32 gradient averaged by `dist.all_reduce` + "
        "divide, the rest of the script unchanged). Training samples/s over all workers, "
        "per-epoch test excluded.",
        "",
        "| | fusedcoll | Gloo |",
        "| --- | ---: | ---: |",
        f"| median samples/s | {statistics.median(fc):.0f} | {statistics.median(gl):.0f} |",
        f"| min-max | {min(fc):.0f}-{max(fc):.0f} | {min(gl):.0f}-{max(gl):.0f} |",
        f"| final accuracy (first pair) | {100 * acc['fusedcoll']:.2f}% | {100 * acc['gloo']:.2f}% |",
        "",
        f"Time ratio fusedcoll / Gloo (= Gloo samples/s / fusedcoll samples/s), median of the "
        f"pairs: **{statistics.median(ratios):.3f}** (pairs: "
        + ", ".join(f"{x:.3f}" for x in ratios) + ").",
    ]
    with open(os.path.join(args.out, "throughput.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default=os.path.join(ROOT, "docs/results/mnist-torch"))
    p.add_argument("--gloo-pairs", type=int, default=0)
    p.add_argument("--python", default=sys.executable)
    args, rest = p.parse_known_args()
    extra = ["--epochs", str(args.epochs), "--lr", str(args.lr), "--seed", str(args.seed)] + \
        [a for a in rest if a != "--"]
    if args.gloo_pairs:
        gloo_pairs(args, extra, args.python)
    else:
        lab_table(args, extra, args.python)


if __name__ == "__main__":
    main()
