#!/usr/bin/env python3
# Raw TCP in fusedcoll-transport-bench's stream pattern, without MPI: whether the namespace
# cluster's links carry every pair's stream both ways at once at one pair's rate
# (docs/simulation.md, "Calibrating a preset", the loaded NIC):
#
#   rm -rf /tmp/tcp-stream-pairs.rdv
#   scripts/netns-cluster -H 2 -r 2 --rate 1gbit -- /usr/bin/python3 scripts/tcp-stream-pairs.py \
#       [BYTES [both|one]]
#
# mpiexec starts the processes; MPI itself is not used. Rank r streams BYTES (default 64 MiB) to
# its partner r + size/2 (mod size), the rank of the same index on the other host, through a
# blocking socket of its own in 1 MiB writes, while receiving as much from it on another (both,
# the default), or only the lower rank of each pair sends (one). Each rank prints its times; a
# host's rate each way is its ranks' bytes over the slowest of them.
import os, socket, sys, threading, time
rank = int(os.environ["OMPI_COMM_WORLD_RANK"]); size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
N = int(sys.argv[1]) if len(sys.argv) > 1 else (64 << 20)
both = (sys.argv[2] if len(sys.argv) > 2 else "both") == "both"
d = "/tmp/tcp-stream-pairs.rdv"
os.makedirs(d, exist_ok=True)
partner = (rank + size // 2) % size
ip = [a for a in os.popen("hostname -I").read().split() if not a.startswith("127.")][0]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((ip, 5300 + rank)); ls.listen(1)
open(f"{d}/{rank}.tmp", "w").write(ip); os.rename(f"{d}/{rank}.tmp", f"{d}/{rank}")
deadline = time.time() + 60
while not os.path.exists(f"{d}/{partner}"):
    if time.time() > deadline: sys.exit(f"tcp-stream-pairs: rank {rank}: no address of {partner}")
    time.sleep(0.01)
out = socket.create_connection((open(f"{d}/{partner}").read(), 5300 + partner), timeout=60)
ls.settimeout(60); inc, _ = ls.accept(); out.settimeout(None); inc.settimeout(None)
open(f"{d}/c{rank}", "w").close()  # everyone connected: start together
while not all(os.path.exists(f"{d}/c{r}") for r in range(size)):
    if time.time() > deadline: sys.exit(f"tcp-stream-pairs: rank {rank}: not every rank connected")
    time.sleep(0.001)
time.sleep(0.2)
buf = memoryview(bytearray(1 << 20)); res = {}
sends, recvs = both or rank < partner, both or rank > partner
t0 = time.time()
def send():
    s = 0
    while s < N:
        n = min(len(buf), N - s); out.sendall(buf[:n]); s += n
    res["send"] = time.time() - t0
th = threading.Thread(target=send) if sends else None
if th: th.start()
if recvs:
    got, rb = 0, memoryview(bytearray(1 << 20))
    while got < N:
        n = inc.recv_into(rb)
        if n == 0: break
        got += n
    res["recv"] = time.time() - t0
if th: th.join()
print(f"rank {rank} ({ip}): " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in res.items()) +
      f" for {N} B each way", flush=True)
time.sleep(0.5)  # the partner's last bytes before the sockets close
