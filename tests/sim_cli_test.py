#!/usr/bin/python3
"""fusedcoll-sim's command line: every bad option or value of every command is refused with a
message naming it, exit status 1 and nothing simulated (an empty stdout), and the good lines
still run (ctest sim_cli_errors, label sim).

usage: tests/sim_cli_test.py PATH/fusedcoll-sim
"""
import shlex
import subprocess
import sys

# (arguments, what the error must say)
BAD = [
    # Unknown options, for every command (they used to be ignored: --node 16 ran the defaults).
    ("op embedding --bogus 5", "unknown option '--bogus'"),
    ("op embedding --bogus", "unknown option '--bogus'"),
    ("dlrm --node 16", "unknown option '--node'"),
    ("sweep --nodes-list 8", "unknown option '--nodes-list'"),
    ("transfer --size 5", "unknown option '--size'"),
    ("dlrm -n 2", "unknown option '-n'"),
    ("dlrm --nodes=2", "unknown option '--nodes=2'"),
    # Another command's option, or another operator's size.
    ("dlrm --fine", "--fine is not an option of 'dlrm'"),
    ("sweep --nodes 8", "--nodes is not an option of 'sweep'"),
    ("transfer --batch 4", "--batch is not an option of 'transfer'"),
    ("op gemv --tables 3", "op gemv: --tables is not a size of gemv"),
    ("op gemm --m 3", "op gemm: --m is not a size of gemm"),
    ("op embedding --perf-bytes 4096 --dim 3", "--dim with --perf-bytes"),
    ("op embedding --bags 2 --pooling 3", "--bags and --pooling are one option"),
    ("sweep --quick --fine", "--fine or --quick, not both"),
    # Arguments: extra, missing, repeated.
    ("dlrm extra", "dlrm: unexpected argument 'extra'"),
    ("op gemv 3", "op: unexpected argument '3'"),
    ("op", "op: which operator?"),
    ("op conv", "unknown operator 'conv'"),
    ("frob", "unknown command 'frob'"),
    ("dlrm --nodes 2 --nodes 3", "option --nodes given twice"),
    ("dlrm --nodes", "option --nodes needs a value"),
    # Integers: not numbers, trailing text, fractions, negatives, zero, overflow.
    ("op embedding --batch 5x", "--batch '5x' is not an integer in [1, 1099511627776]"),
    ("op embedding --batch 1e3", "--batch '1e3' is not an integer in [1, 1099511627776]"),
    ("op embedding --dim 1.5", "--dim '1.5' is not an integer in [1, 1099511627776]"),
    ("op embedding --tables ''", "--tables '' is not an integer in [1, 1099511627776]"),
    ("op embedding --batch 0", "--batch '0' is not an integer in [1, 1099511627776]"),
    ("op gemm --tokens -4", "--tokens '-4' is not an integer in [1, 1099511627776]"),
    ("op gemm --experts -1", "--experts '-1' is not an integer in [0, 1099511627776]"),
    ("op gemv --k 99999999999999999999", "--k '99999999999999999999' is not an integer in [1, 1099511627776]"),
    ("op gemv --n 2199023255552", "--n '2199023255552' is not an integer in [1, 1099511627776]"),
    ("op embedding --nodes 2x", "--nodes '2x' is not an integer in [1, 1048576]"),
    ("op embedding --nodes 0", "--nodes '0' is not an integer in [1, 1048576]"),
    ("dlrm --nodes -8", "--nodes '-8' is not an integer in [1, 1048576]"),
    ("dlrm --nodes 2,,4", "--nodes = '2,,4': a comma-separated list"),
    ("dlrm --nodes 2,", "--nodes = '2,': a comma-separated list"),
    ("dlrm --nodes 8,16,4096x", "--nodes '4096x' is not an integer in [1, 1048576]"),
    ("dlrm --gpus-per-node 0", "--gpus-per-node '0' is not an integer in [1, 1048576]"),
    ("dlrm --gpus-per-node 4294967297", "--gpus-per-node '4294967297' is not an integer in [1, 1048576]"),
    ("dlrm --radix 0", "--radix '0' is not an integer in [1, 1048576]"),
    ("dlrm --batch abc", "--batch 'abc' is not an integer in [1, 1099511627776]"),
    ("op embedding --bags x", "'x' is not an integer"),
    ("op embedding --bags 3-1", "--bags = 3-1: MIN > MAX"),
    ("op embedding --bags 1-", "'' is not an integer"),
    ("op embedding --pooling -2", "--pooling (lookups per bag"),
    ("op gemv --perf-bytes 0", "--perf-bytes '0' is not a byte count in [1, 1099511627776]"),
    ("transfer --src 16", "--src '16' is not an integer in [0, 15]"),
    ("transfer --dst -1", "--dst '-1' is not an integer in [0, 15]"),
    ("transfer --bytes 0", "--bytes '0' is not a byte count in [1, 1099511627776]"),
    ("transfer --nodes 2,4", "transfer: --nodes takes one node count"),
    ("sweep --jobs 0", "--jobs '0' is not an integer in [1, 1024]"),
    ("sweep --jobs two", "--jobs 'two' is not an integer in [1, 1024]"),
    # Real numbers: not numbers, NaN, infinities, below their bound.
    ("dlrm --merge-us -1", "--merge-us '-1' is not a number in [0, 1e+09]"),
    ("dlrm --merge-us 1us", "--merge-us '1us' is not a number in [0, 1e+09]"),
    ("op gemv --precision-us 0", "--precision-us '0' must be > 0"),
    ("sweep --precision-us nan", "--precision-us 'nan' is not a number in [0, 1e+06]"),
    ("dlrm --taper inf", "--taper 'inf' is not a number in [1, 1e+06]"),
    ("dlrm --taper 1e999", "--taper '1e999' is not a number in [1, 1e+06]"),
    ("dlrm --taper 0.5", "--taper '0.5' is not a number in [1, 1e+06]"),
    # Values the parser takes and the simulator's checks refuse, before anything runs.
    ("dlrm --nodes 8,12", "12 nodes do not fill leaf switches"),
    ("dlrm --nodes 1 --batch 4", "global batch 4 < 8 ranks"),
    ("dlrm --sharding diagonal", "unknown sharding 'diagonal'"),
    ("sweep --workload dlrm,nope", "unknown workload 'nope'"),
    ("sweep --workload ''", "no workload in ''"),
]

# (arguments, what stdout must say): small runs that must still work.
GOOD = [
    ("--help", "usage:"),
    ("transfer --bytes 4096", "transfer 0 -> 8, 4096 B"),
    ("transfer --nodes 2 --src 0 --dst 8 --bytes 1M", "transfer 0 -> 8, 1048576 B"),
    ("op gemv --nodes 1 --m 2 --k 1024 --n 1024", "gemv on 1 nodes"),
    ("op embedding --nodes 1 --batch 64 --bags 1-3", "embedding on 1 nodes"),
    ("dlrm --nodes 1 --batch 64 --interaction dot --precision-us 0.5", "paper (SC'24"),
]


def run(sim, args):
    return subprocess.run([sim] + shlex.split(args), capture_output=True, text=True, timeout=120)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sim = sys.argv[1]
    failures = []
    for args, want in BAD:
        p = run(sim, args)
        if p.returncode != 1 or want not in p.stderr or p.stdout:
            failures.append(f"fusedcoll-sim {args}: exit {p.returncode}, stderr {p.stderr.strip()!r}, "
                            f"stdout {p.stdout[:200]!r}; wanted exit 1 and {want!r}")
    for args, want in GOOD:
        p = run(sim, args)
        if p.returncode != 0 or want not in p.stdout:
            failures.append(f"fusedcoll-sim {args}: exit {p.returncode}, stderr {p.stderr.strip()!r}; "
                            f"wanted exit 0 and {want!r}")
    for f in failures:
        print(f)
    print(f"{len(BAD)} bad lines, {len(GOOD)} good lines, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
