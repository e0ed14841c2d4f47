#!/usr/bin/python3
"""Plots fusedcoll-sim dlrm --csv output: iteration time baseline vs fused per node count, split
into compute and exposed communication, with the reduction and the paper's 21% at 128 nodes.

usage: scripts/plot-sim-dlrm.py IN.csv OUT.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    nodes = [int(r["nodes"]) for r in rows]
    x = range(len(rows))
    f = lambda k: [float(r[k]) / 1000 for r in rows]  # us -> ms
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    w = 0.38
    ax.bar([i - w / 2 for i in x], f("base_compute_us"), w, color="#4c72b0", label="baseline compute")
    ax.bar([i - w / 2 for i in x], f("base_exposed_us"), w, bottom=f("base_compute_us"),
           color="#a6bddb", label="baseline exposed comm")
    ax.bar([i + w / 2 for i in x], f("fused_compute_us"), w, color="#dd8452", label="fused compute")
    ax.bar([i + w / 2 for i in x], f("fused_exposed_us"), w, bottom=f("fused_compute_us"),
           color="#fdd0a2", label="fused exposed comm")
    ax.set_xticks(list(x), [f"{n}\n({r['ranks']})" for n, r in zip(nodes, rows)])
    ax.set_xlabel("nodes (ranks)")
    ax.set_ylabel("iteration time, ms")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    inter = {"dcn": "DLRM-DCNv2", "dot": "DLRM, dot interaction"}.get(rows[0].get("interaction", "dot"))
    ax.set_title(f"{inter} iteration, preset {rows[0]['preset']} ({rows[0]['pooling']})")
    ax2.plot(nodes, [float(r["reduction_pct"]) for r in rows], "o-", label="SimGrid")
    ax2.plot(nodes, [float(r["ab_reduction_pct"]) for r in rows], "s--", label="closed-form alpha-beta")
    ax2.plot([128], [21], "r*", markersize=14, label="paper: 21% at 128 nodes")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(nodes, [str(n) for n in nodes])
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("iteration time saved by fusion, %")
    ax2.set_ylim(bottom=0)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
