#!/bin/bash
# multihost_fault.sh CLUSTER MPI_FAULTS drop|kill|drop_delayed [CLUSTER OPTIONS...]: a fault
# across hosts ends the job in time. 2 hosts x 2 ranks loop AllReduces over the p2p transport;
# 4 s in, host 2's link drops every packet (drop) or its first rank is killed (kill).
# drop_delayed is drop on links with 50 us added latency: netem, or where the kernel has none,
# the cluster's delay line, which then does the dropping (the link stays up).
#  drop: every rank (all four live on) must fail with a TimeoutError within FUSEDCOLL_TIMEOUT
#        (3 s) and say who it waited for; each writes it to a file, since host 2 cannot forward
#        its output any more. The job itself is then ended by the cluster's --timeout.
#  kill: Open MPI notices the dead rank and ends the job, naming it.
set -u
cluster=$1 prog=$2 fault=$3
shift 3
extra=("$@") delayed=0
if [ "$fault" = drop_delayed ]; then
  fault=drop delayed=1
  extra+=(--delay 50us)
fi
dir=$(mktemp -d /tmp/multihost-fault.XXXXXX)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
out=$(FUSEDCOLL_TIMEOUT=3 FUSEDCOLL_MPI_TRANSPORT=p2p "$cluster" -H 2 -r 2 --timeout 25 \
        "${extra[@]}" --at 4:$fault:2 -- "$prog" loop "$dir" 2>&1)
rc=$?
took=$(($(date +%s) - start))
echo "$out" | tail -20
echo "job status $rc after $took s"
[ $rc = 77 ] && exit 77
fail() { echo "FAIL: $*"; exit 1; }
if [ $delayed = 1 ]; then
  echo "$out" | grep -Eq "link now drops every packet \((netem loss 100%|delay line)\)" ||
    fail "the cluster did not say how host 2's delayed link was cut"
fi
if [ "$fault" = drop ]; then
  for r in 0 1 2 3; do
    f="$dir/rank.$r"
    [ -s "$f" ] || fail "rank $r wrote no failure"
    cat "$f"
    grep -q "fusedcoll mpi: timeout: rank $r waited more than 3 s" "$f" || fail "rank $r: no timeout"
  done
  # Every rank names a peer it waited for: a slot of that rank ('all_reduce.in[2]'), the peer that
  # never took this rank's data, or, in the entry rendezvous, the ranks whose records never came.
  # A rank may wait on a peer of its own host that is itself stalled on the other host (rank 0 on
  # chunk owner rank 1, which waits for rank 3), so the silent host is required of each host's
  # reports together, not of each rank's.
  for r in 0 1 2 3; do
    peers=$(echo 0123 | tr -d "$r")
    grep -Eq "\[[$peers]\]'|rank [$peers] |rank\(s\) ([0-9]+, )*[$peers]" "$dir/rank.$r" ||
      fail "rank $r does not name the peer it waited for"
  done
  cat "$dir/rank.0" "$dir/rank.1" | grep -Eq "\[(2|3)\]'|rank (2|3) |rank\(s\) ([0-9]+, )*(2|3)" ||
    fail "neither rank of host 1 names a rank of host 2 as the one it waited for"
  cat "$dir/rank.2" "$dir/rank.3" | grep -Eq "\[(0|1)\]'|rank (0|1) |rank\(s\) (0|1)" ||
    fail "neither rank of host 2 names a rank of host 1 as the one it waited for"
else
  echo "$out" | grep -Eq "rank 2 with PID [0-9]+ on node [^ ]+ exited on signal 9" ||
    fail "mpiexec did not report the killed rank 2"
  [ "$took" -le 15 ] || fail "the job took $took s to end"
fi
echo PASS
