#!/usr/bin/python3
"""Draws docs/results.md's plots from the CSVs scripts/results writes (fusedcoll-perf and
fusedcoll-mnist --csv-file, fusedcoll-sim --csv, the recorded GPU runs).

usage: scripts/plot-results.py DATA_DIR PLOTS_DIR
Writes ops.png, collectives.png, compressed.png, mnist.png and sim-dlrm.png, each from the CSVs
present (a plot whose CSVs are missing is skipped with a message); predicted against measured is
scripts/validate-model's own plot. Exit status 3 when matplotlib is missing (apt-get install
python3-matplotlib; scripts/setup.sh).
"""
import csv
import os
import subprocess
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot-results: python3-matplotlib is missing (scripts/setup.sh installs it)",
          file=sys.stderr)
    sys.exit(3)

OPS = ("embedding", "gemv", "gemm")
NAMES = {  # label -> legend text
    "emu": "emu, wall clock (4 virtual GPUs, no link model)",
    "vt-mi250x": "emu, virtual time, mi250x (predicted)",
    "mpi-2": "mpi, one host, 2 ranks",
    "mpi-4": "mpi, one host, 4 ranks on 2 cores",
    "mpi-2-sym": "mpi, 2 ranks, into a SymmetricBuffer",
    "mpi-4-sym": "mpi, 4 ranks, into a SymmetricBuffer",
    "hosts-1gbit": "mpi, 2 x 2 namespace hosts, 1 Gbit/s",
    "hosts-10gbit": "mpi, 2 x 2 namespace hosts, 10 Gbit/s",
    "h100-52da75e": "H100, 4 ranks on one GPU (recorded 2026-11-26)",
}


def read(data, name):
    path = os.path.join(data, name)
    if name.startswith("recorded-") and not os.path.exists(path):  # the GPU runs: not rerun here
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                            "results", "data", name)
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def labels_of(rows):
    out = []
    for r in rows:
        if r["label"] not in out:
            out.append(r["label"])
    return out


def size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda b, _: f"{b / (1 << 20):g}M" if b >= 1 << 20 else f"{b / 1024:g}K"))


def footer(fig, data):
    dates = sorted({r["started_utc"][:10] for r in read(data, "runs.csv")})
    stamp = f", rerun {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "") if dates else ""
    fig.text(0.995, 0.005, f"fusedcoll scripts/results{stamp}", ha="right", va="bottom", fontsize=7,
             color="#666")


def save(fig, plots, name, data):
    footer(fig, data)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path = os.path.join(plots, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot-results: wrote {path}")


def plot_ops(data, plots):
    rows = read(data, "ops.csv") + read(data, "recorded-h100-ops.csv")
    if not rows:
        return print("plot-results: no ops.csv, ops.png skipped")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4), sharey=True)
    colors = {}
    for ax, op in zip(axes, OPS):
        for label in labels_of(rows):
            rs = sorted((r for r in rows if r["label"] == label and r["op"] == op),
                        key=lambda r: int(r["size"]))
            if not rs:
                continue
            c = colors.setdefault(label, f"C{len(colors)}")
            x = [int(r["size"]) for r in rs]
            ax.plot(x, [float(r["out_ratio"]) for r in rs], "o-", color=c,
                    label=NAMES.get(label, label) + ": scale-out")
            ax.plot(x, [float(r["up_ratio"]) for r in rs], "s--", color=c, alpha=0.7,
                    label=NAMES.get(label, label) + ": scale-up")
        ax.axhline(1, color="k", lw=0.8)
        size_axis(ax)
        ax.set_title({"embedding": "EmbeddingAllToAll", "gemv": "GemvAllReduce",
                      "gemm": "GemmAllToAll"}[op])
        ax.set_xlabel("output bytes per rank")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fused time ÷ unfused time (below 1: fused faster)")
    handles, names = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="upper center", ncol=3, fontsize=7, bbox_to_anchor=(0.5, 1.0))
    fig.subplots_adjust(top=0.72)
    footer(fig, data)
    fig.savefig(os.path.join(plots, "ops.png"), dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"plot-results: wrote {os.path.join(plots, 'ops.png')}")


def plot_collectives(data, plots):
    rows = [r for r in read(data, "collectives.csv") if r["ratio"]]
    rec = read(data, "recorded-h100-collectives.csv")
    if not rows and not rec:
        return print("plot-results: no collectives.csv, collectives.png skipped")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, op, title in zip(axes, ("allreduce", "alltoall"), ("AllReduce", "All-to-All")):
        for i, label in enumerate(labels_of(rows)):
            rs = sorted((r for r in rows if r["label"] == label and r["op"] == op),
                        key=lambda r: int(r["size"]))
            if rs:
                ax.plot([int(r["size"]) for r in rs], [float(r["ratio"]) for r in rs], "o-",
                        color=f"C{i}", label=NAMES.get(label, label) + " ÷ Open MPI")
        rs = [r for r in rec if r["op"] == op]
        if rs:
            ax.plot([int(r["size"]) for r in rs], [float(r["ratio"]) for r in rs], "k^:",
                    label=NAMES["h100-52da75e"] + " ÷ " +
                    ("a fold kernel" if op == "allreduce" else "copy engines"))
        ax.axhline(1, color="k", lw=0.8)
        ax.set_yscale("log")
        size_axis(ax)
        ax.set_title(title)
        ax.set_xlabel("bytes per rank")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("fusedcoll time ÷ baseline time")
    save(fig, plots, "collectives.png", data)


def plot_compressed(data, plots):
    rows = read(data, "compressed.csv")
    link = [r for r in rows if r["label"] == "emu-link"]
    if not rows:
        return print("plot-results: no compressed.csv, compressed.png skipped")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    wires = (("none", "f32", "C0"), ("fp16", "fp16", "C1"), ("fp8-e4m3", "fp8 E4M3", "C2"))
    vt = [(float(r["label"].rsplit("-", 1)[1]), r) for r in rows
          if r["label"].startswith("vt-4cores-link-")]
    for wire, name, c in wires:
        pts = sorted((g, float(r["time_us"]) / 1000) for g, r in vt if r["compress"] == wire)
        if pts:
            ax.plot(*zip(*pts), "-", color=c, lw=2, alpha=0.5,
                    label=f"{name}, predicted (virtual time, 4 cores per device)")
        rs = sorted((r for r in link if r["compress"] == wire), key=lambda r: float(r["link_gbps"]))
        if rs:
            ax.plot([float(r["link_gbps"]) for r in rs], [float(r["time_us"]) / 1000 for r in rs],
                    "o--", color=c, label=f"{name}, emu link model, wall clock (4 ranks on 2 cores)")
        for label, gbps, marker in (("hosts-1gbit", 0.125, "D"), ("hosts-10gbit", 1.25, "D")):
            h = [r for r in rows if r["label"] == label and r["compress"] == wire]
            if h:
                ax.plot([gbps], [float(h[0]["time_us"]) / 1000], marker, color=c, mfc="none",
                        ms=9, label=f"{name}, 2 x 2 hosts ({'f32 direct' if wire == 'none' else 'chain'})"
                        if label == "hosts-1gbit" else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link rate per device, GB/s")
    ax.set_ylabel("AllReduce time, ms")
    ax.set_title(f"AllReduce of {int(link[0]['size']) >> 20 if link else 64} MiB per rank")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    # Speed-ups: the link model swept, and the fixed settings beside it.
    for wire, name, c in wires[1:]:
        rs = sorted((r for r in link if r["compress"] == wire), key=lambda r: float(r["link_gbps"]))
        f32 = {r["link_gbps"]: float(r["time_us"]) for r in link if r["compress"] == "none"}
        pts = [(float(r["link_gbps"]), f32[r["link_gbps"]] / float(r["time_us"])) for r in rs
               if r["link_gbps"] in f32]
        if pts:
            ax2.plot(*zip(*pts), "o--", color=c, label=f"{name}, emu link model, wall clock")
        f32v = {g: float(r["time_us"]) for g, r in vt if r["compress"] == "none"}
        pv = sorted((g, f32v[g] / float(r["time_us"])) for g, r in vt
                    if r["compress"] == wire and g in f32v)
        if pv:
            ax2.plot(*zip(*pv), "-", color=c, lw=2, alpha=0.5, label=f"{name}, predicted")
        for label, gbps in (("hosts-1gbit", 0.125), ("hosts-10gbit", 1.25)):
            h = {r["compress"]: float(r["time_us"]) for r in rows if r["label"] == label}
            if wire in h and "none" in h:
                ax2.plot([gbps], [h["none"] / h[wire]], "D", color=c, mfc="none", ms=9,
                         label=f"{name}, 2 x 2 hosts (chain)" if label == "hosts-1gbit" else None)
    ax2.axhline(2, color="C1", lw=0.6, ls=":")
    ax2.axhline(4, color="C2", lw=0.6, ls=":")
    ax2.axhline(1, color="k", lw=0.8)
    ax2.set_xscale("log")
    ax2.set_xlabel("link rate per device, GB/s")
    ax2.set_ylabel("f32 time ÷ compressed time")
    ax2.set_title("speed-up of the compressed wire (dotted: its byte ratio)")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=7)
    save(fig, plots, "compressed.png", data)


def plot_mnist(data, plots):
    rows = read(data, "mnist.csv")
    torch = read(data, "mnist-torch.csv")
    if not rows and not torch:
        return print("plot-results: no mnist.csv, mnist.png skipped")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    local = [r for r in rows if r["label"] == "emu"]
    name = lambda w, c: ("serial" if w == "1" else f"{w} workers") + ("" if c == "none" else f", {c}")  # noqa: E731
    bars = [(f"C++: {name(r['workers'], r['compress'])}", float(r["train_s"]),
             float(r["final_accuracy"]), "C0") for r in local]
    bars += [(f"PyTorch: {name(r['workers'], r['compress'])}"
              + (" (Gloo)" if r["comm"] == "gloo" else ""), float(r["train_s"]),
              float(r["final_accuracy"]), "C3" if r["comm"] == "gloo" else "C1") for r in torch]
    if bars:
        y = range(len(bars))
        ax.barh(list(y), [b[1] for b in bars], color=[b[3] for b in bars])
        for i, b in enumerate(bars):
            ax.text(b[1], i, f" {100 * b[2]:.2f}%", va="center", fontsize=7)
        ax.set_yticks(list(y), [b[0] for b in bars], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("training time, s (labels: test accuracy)")
        ep = local[0]["epochs"] if local else (torch[0]["epochs"] if torch else "?")
        ax.set_title(f"MNIST, {ep} epochs, one host (2 shared cores)")
        ax.grid(alpha=0.3, axis="x")
    hosts = [r for r in rows if r["label"] == "hosts-1gbit"]
    if hosts:
        x = range(len(hosts))
        ax2.bar(list(x), [float(r["epoch_s_median"]) for r in hosts], color="C2",
                label="epoch (median)")
        ax2.bar(list(x), [float(r["exchange_s_median"]) for r in hosts], color="C4", width=0.5,
                label="of which gradient exchange (rank 0)")
        for i, r in enumerate(hosts):
            ax2.text(i, float(r["epoch_s_median"]), f"{100 * float(r['final_accuracy']):.2f}%",
                     ha="center", va="bottom", fontsize=8)
        ax2.set_xticks(list(x), [f"{r['compress']} ({r['algo']})" for r in hosts])
        ax2.set_ylabel("s per epoch")
        ax2.set_title(f"2 x 2 hosts at 1 Gbit/s, hidden {hosts[0]['hidden']}, batch "
                      f"{hosts[0]['batch_size']}")
        ax2.legend(fontsize=8)
        ax2.grid(alpha=0.3, axis="y")
    else:
        ax2.text(0.5, 0.5, "across hosts: not rerun here (needs root)", ha="center",
                 transform=ax2.transAxes)
        ax2.set_axis_off()
    save(fig, plots, "mnist.png", data)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data, plots = sys.argv[1:]
    os.makedirs(plots, exist_ok=True)
    for f in (plot_ops, plot_collectives, plot_compressed, plot_mnist):
        f(data, plots)
    dlrm = os.path.join(data, "sim-dlrm.csv")
    if os.path.exists(dlrm):
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "plot-sim-dlrm.py"), dlrm,
                        os.path.join(plots, "sim-dlrm.png")], check=True)
        print(f"plot-results: wrote {os.path.join(plots, 'sim-dlrm.png')}")


if __name__ == "__main__":
    main()
