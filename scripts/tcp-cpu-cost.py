#!/usr/bin/env python3
# The CPU cost of TCP between two namespace hosts, for a preset's links.nic_cpu_gbps
# (docs/simulation.md, "Calibrating a preset"):
#
#   rm -f /tmp/tcp-cpu-cost.rdv
#   scripts/netns-cluster -H 2 -r 1 -- /usr/bin/python3 scripts/tcp-cpu-cost.py [BYTES]
#
# One process per host (mpiexec starts them; MPI itself is not used, so nothing spins while it
# waits): rank 1 listens on its host's address, rank 0 streams BYTES (default 1 GiB) through
# blocking sockets in 1 MiB writes. Each end prints its rate and its getrusage CPU; the sender
# also prints the whole machine's busy CPU over the stream from /proc/stat (softirq included),
# whose bytes per core-second are both ends' rate together.
import os, socket, resource, time, sys
rank = int(os.environ["OMPI_COMM_WORLD_RANK"]); d = "/tmp/tcp-cpu-cost.rdv"
N = int(sys.argv[1]) if len(sys.argv) > 1 else (1 << 30)
def cpu(): r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
def stat():
    f = open("/proc/stat").readline().split()[1:]; v = list(map(int, f)); return sum(v) - v[3] - v[4], sum(v)
buf = bytearray(1 << 20)
if rank == 1:
    ip = [a for a in os.popen("hostname -I").read().split() if not a.startswith("127.")][0]
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((ip, 5201)); s.listen(1)
    open(d + ".tmp", "w").write(ip); os.rename(d + ".tmp", d)
    c, _ = s.accept(); mv = memoryview(buf); got = 0
    c0 = cpu(); t0 = time.time()
    while got < N:
        n = c.recv_into(mv); got += n
        if n == 0: break
    t = time.time() - t0; c1 = cpu(); c.sendall(b"k")
    print(f"receiver: {got} B in {t:.3f} s = {got/t/1e9:.3f} GB/s; cpu {c1-c0:.3f} s = {got/(c1-c0)/1e9:.3f} GB/s of cpu", flush=True)
else:
    while not os.path.exists(d): time.sleep(0.05)
    ip = open(d).read(); c = socket.create_connection((ip, 5201)); mv = memoryview(buf)
    b0 = stat(); c0 = cpu(); t0 = time.time(); sent = 0
    while sent < N: c.sendall(mv); sent += len(mv)
    c.recv(1); t = time.time() - t0; c1 = cpu(); b1 = stat()
    busy = (b1[0] - b0[0]) / os.sysconf("SC_CLK_TCK")
    os.remove(d)
    print(f"sender: {sent} B in {t:.3f} s = {sent/t/1e9:.3f} GB/s; cpu {c1-c0:.3f} s = {sent/(c1-c0)/1e9:.3f} GB/s of cpu; machine busy {busy:.2f} core-s = {sent/busy/1e9:.3f} GB/s of cpu (both ends, all of the machine)", flush=True)
