#!/bin/bash
# multihost_delay.sh CLUSTER MPI_RTT DELAYLINE: added link latency across namespace hosts.
# 2 hosts x 1 rank bounce one byte (mpi_rtt): on plain links, with --delay 50us (netem where the
# kernel has it, else the delay line), and with the delay line forced. Every host's egress adds
# 50 us, so a round trip crosses two delayed links: its median must grow by >= 80 us (100 us
# less slack for a clock read), and by < 100 us + 5 ms (the delay line's own wake-ups on a
# loaded 2-core machine are bounded). Medians of 400 round trips; the bounds are loose on purpose.
set -u
cluster=$1 rtt=$2 delayline=$3
fail() { echo "FAIL: $*" >&2; exit 1; }  # stderr: median() runs in $(...)
median() {  # CLUSTER OPTIONS...: the median round trip in us, or the run's output on failure
  local out rc
  out=$("$cluster" -H 2 -r 1 --timeout 60 --delayline "$delayline" "$@" -- "$rtt" 400 2>&1)
  rc=$?
  [ $rc = 77 ] && { echo "$out" >&2; exit 77; }
  [ $rc = 0 ] || fail "netns-cluster $* exited $rc: $out"
  echo "$out" | grep -E "netns-cluster: --delay" >&2
  echo "$out" | sed -n 's/^rtt_us median \([0-9.]*\) .*/\1/p'
}
plain=$(median) || exit $?
delayed=$(median --delay 50us) || exit $?
forced=$(median --delay 50us --link-emulator delayline) || exit $?
echo "median round trip: plain $plain us, --delay 50us $delayed us, delay line forced $forced us"
[ -n "$plain" ] && [ -n "$delayed" ] && [ -n "$forced" ] || fail "a run printed no round trip"
for d in $delayed $forced; do
  awk -v p="$plain" -v d="$d" 'BEGIN { exit !(d - p >= 80) }' ||
    fail "a round trip grew by less than 80 us with --delay 50us ($plain -> $d us)"
  awk -v p="$plain" -v d="$d" 'BEGIN { exit !(d - p < 5100) }' ||
    fail "a round trip grew by more than 5.1 ms with --delay 50us ($plain -> $d us)"
done
echo PASS
