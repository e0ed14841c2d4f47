#!/usr/bin/python3
"""scripts/calibrate-host-preset's NIC of the 2 x 2 namespace presets (derive(), link_nic) on
hand-made figures, without running a benchmark: the p2p ping-pong's rate, or where the shaping
bounds the wire, the smaller of it and the transport bench's all-pairs stream per host and
direction. ctest calibrate_links, label model.

usage: tests/calibrate_links_test.py PATH/scripts/calibrate-host-preset
"""
import importlib.machinery
import importlib.util
import re
import sys

loader = importlib.machinery.SourceFileLoader("calibrate", sys.argv[1])
spec = importlib.util.spec_from_loader("calibrate", loader)
cal = importlib.util.module_from_spec(spec)
loader.exec_module(cal)

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


HOST = """name = host
[device]
compute_units = 2
resident_wgs_per_cu = 4
cu_gflops = 66
memory_gbps = 12.6
launch_us = 5
node_memory_gbps = 27
gemm_pack_rows = 8
gemm_cold_gbps = 2.5
[links]
peer_gbps = 12
peer_us = 0.38
put_cu_share = 1
[efficiency]
gemm = 0.7
"""


def transport(stream_us):
    run = dict(put_cost_us=0.07, stream_bytes=16777216.0, stream_us=stream_us,
               pingpong_alone_us=23.0, pingpong_loaded_us=25.0)
    return dict(put_cost_us=0.07, stream_bytes=16777216.0, stream_us=stream_us, alone_us=23.0,
                loaded_us=25.0, handover_us=2.0, runs=[run])


def link(gbps, stream_us):
    return dict(latency_us=11.7, gbps=gbps, runs=1, latency_runs=[11.7], gbps_runs=[gbps],
                transport=transport(stream_us))


def nic_of(text):
    return float(re.search(r"^nic_gbps = (\S+)$", text, re.M).group(1))


FIG = dict(cores=2, date="2026-11-29", machine="test", transport_one_host=transport(30000.0),
           tcp_cpu=dict(both_ends_gbps=1.6, bytes=1 << 30, runs=[1.6]),
           links={
               # CPU-bound: the loaded stream (2 x 16 MiB a host in 35 ms, 0.959 GB/s) is the
               # CPU's, priced by nic_cpu_gbps; the NIC stays the ping-pong's.
               "unshaped": link(1.14, 35000.0),
               # The shaper above the CPU's rate (one pair 1.10 >= 0.8 x 1.14): a slow loaded
               # stream (0.618 GB/s) is the CPU's or noise, not the wire.
               "10gbit": link(1.10, 54280.0),
               # The shaper bounds one pair (0.119 < 0.8 x 1.14): 2 ranks x 16 MiB = 32 MiB each
               # way per host in 418 ms: 33554432 B / 0.418 s = 0.080274 GB/s, below 0.119.
               "1gbit": link(0.119, 418000.0),
           })
out = cal.derive(HOST, FIG)
check("unshaped: the ping-pong's", nic_of(out["host-2x2-unshaped.preset"]), 1.14)
check("10gbit: the ping-pong's", nic_of(out["host-2x2-10gbit.preset"]), 1.1)
check("1gbit: the loaded stream's per host", nic_of(out["host-2x2-1gbit.preset"]), 0.08027)
check("1gbit's comment names the loaded rate",
      "moved 0.08027 GB/s each way" in out["host-2x2-1gbit.preset"], True)
check("host-4ranks has no NIC of its own", nic_of(out["host-4ranks.preset"]), 6.0)

# The loaded stream at the ping-pong's rate or faster (2 x 16 MiB in 250 ms: 0.134 GB/s): the
# smaller, the ping-pong's.
nic, note = cal.link_nic(link(0.119, 250000.0), 1.14, 2, "1gbit")
check("a loaded stream faster than one pair", nic, 0.119)
# Per host: 4 ranks a host carry 4 x 16 MiB in the same 418 ms, twice the rate.
nic, note = cal.link_nic(link(0.2, 418000.0), 1.14, 4, "1gbit")
check("4 ranks a host", round(nic, 5), round(4 * 16777216 / 0.418 / 1e9, 5))
# Without an unshaped measurement no shaping can be said to bound the wire.
check("no unshaped figure", cal.link_nic(link(0.119, 418000.0), None, 2, "1gbit")[0], 0.119)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("calibrate_links: all checks passed")
