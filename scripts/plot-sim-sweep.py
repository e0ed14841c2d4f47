#!/usr/bin/python3
"""Draws fusedcoll-sim sweep's CSV as heat maps of the fused reduction, one per map (two axes
through a workload's default point): each cell the simulated reduction in % (1 - fused/baseline)
and, below it, the overlap bound 100 min(kernel, exchange) / baseline; cells at or above the
paper's 21% framed in black.

usage: scripts/plot-sim-sweep.py IN.csv [IN.csv ...] OUT.png (the CSVs of one or more sweeps,
e.g. one per workload)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

PAPER = 21.0
TITLES = {
    "dlrm": "DLRM-DCNv2 iteration (fwd embedding + All-to-All fused)",
    "gemv": "TP decode: GemvAllReduce (scale_out)",
    "moe": "MoE: GemmAllToAll (scale_out)",
}
LABELS = {
    "nodes": "nodes",
    "nic_gbit": "NIC Gbit/s per device",
    "samples": "samples per device",
    "dim": "embedding dim",
    "pooling": "pooling (x MLPerf sizes)",
    "gpus_per_node": "devices per node",
    "batch": "tokens decoded at once",
    "tokens": "tokens per device",
}


def tick(axis, v):
    if axis == "pooling":
        return "1-hot" if v == 0 else f"x{v:g}"
    return f"{v:g}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = []
    for path in sys.argv[1:-1]:
        with open(path) as f:
            rows += list(csv.DictReader(f))
    maps = []  # (workload, map) in file order
    for r in rows:
        key = (r["workload"], r["map"])
        if key not in maps:
            maps.append(key)
    workloads = list(dict.fromkeys(w for w, _ in maps))
    cols = max(sum(1 for w, _ in maps if w == wl) for wl in workloads)
    fig, axes = plt.subplots(len(workloads), cols, figsize=(4.4 * cols, 3.6 * len(workloads) + 0.8),
                             squeeze=False, layout="constrained")
    norm = TwoSlopeNorm(vmin=-40, vcenter=0, vmax=40)
    image = None
    for i, wl in enumerate(workloads):
        mine = [m for w, m in maps if w == wl]
        for j in range(cols):
            ax = axes[i][j]
            if j >= len(mine):
                ax.axis("off")
                continue
            cells = [r for r in rows if r["workload"] == wl and r["map"] == mine[j]]
            xn, yn = cells[0]["x_name"], cells[0]["y_name"]
            xs = sorted({float(r["x"]) for r in cells})
            ys = sorted({float(r["y"]) for r in cells})
            grid = [[float("nan")] * len(xs) for _ in ys]
            bound = [[float("nan")] * len(xs) for _ in ys]
            for r in cells:
                a, b = ys.index(float(r["y"])), xs.index(float(r["x"]))
                grid[a][b] = float(r["reduction_pct"])
                bound[a][b] = float(r["overlap_bound_pct"])
            image = ax.imshow(grid, origin="lower", cmap="RdBu", norm=norm, aspect="auto")
            for a in range(len(ys)):
                for b in range(len(xs)):
                    v = grid[a][b]
                    ink = "white" if abs(v) > 25 else "black"
                    ax.text(b, a + 0.12, f"{v:.1f}%", ha="center", va="center", fontsize=8.5,
                            color=ink, weight="bold" if v >= PAPER else "normal")
                    ax.text(b, a - 0.22, f"bound {bound[a][b]:.1f}", ha="center", va="center",
                            fontsize=6.5, color=ink)
                    if v >= PAPER:
                        ax.add_patch(Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, lw=2.2,
                                               ec="black"))
            ax.set_xticks(range(len(xs)), [tick(xn, v) for v in xs], fontsize=8)
            ax.set_yticks(range(len(ys)), [tick(yn, v) for v in ys], fontsize=8)
            ax.set_xlabel(LABELS.get(xn, xn), fontsize=9)
            ax.set_ylabel(LABELS.get(yn, yn), fontsize=9)
            ax.set_title(TITLES.get(wl, wl) if j == 0 else "", fontsize=9.5, loc="left")
    fig.colorbar(image, ax=axes, orientation="horizontal", shrink=0.5, extend="both",
                 label=f"reduction, % of the baseline (framed: >= {PAPER:g}%, the paper's)")
    fig.savefig(sys.argv[-1], dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
