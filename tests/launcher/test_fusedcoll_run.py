"""fusedcoll-run (ctest launcher_*, docs/mpi.md): the mpiexec line for a table of inputs, on a
machine of a given size, as root and not; and every refused input or missing piece ends with one
line on stderr naming it and a non-zero exit status, before any mpiexec starts.

    python3 tests/launcher/test_fusedcoll_run.py [path/to/fusedcoll-run]
"""

import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "launcher", "fusedcoll-run")


def load(path):
    loader = importlib.machinery.SourceFileLoader("fusedcoll_run", path)
    spec = importlib.util.spec_from_loader("fusedcoll_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


run = None  # the launcher's module, loaded in __main__

# Hosts the table treats as this machine; every other name is another host.
LOCAL = {"localhost", "here"}

# (arguments, root, cores, FUSEDCOLL_* of the caller, the expected line after "mpiexec")
TABLE = [
    # This machine only: nothing but the rank count, until ranks outnumber the cores.
    ("-np 2 ./app", False, 2, {}, "-n 2 ./app"),
    ("-np 2 ./app", True, 2, {}, "-n 2 --allow-run-as-root ./app"),
    ("-np 4 ./app", False, 2, {},
     "-n 4 --oversubscribe --mca mpi_yield_when_idle 1 ./app"),
    ("-np 4 ./app", False, 8, {}, "-n 4 ./app"),
    ("-np 2 --oversubscribe ./app", False, 8, {},
     "-n 2 --oversubscribe --mca mpi_yield_when_idle 1 ./app"),
    ("-np 2 --transport rma --timeout 20 ./app --size 4K", False, 2, {},
     "-n 2 -x FUSEDCOLL_MPI_TRANSPORT=rma -x FUSEDCOLL_TIMEOUT=20 ./app --size 4K"),
    ("-np 3 --transport p2p --timeout 2.5 python3 t.py", True, 2, {},
     "-n 3 --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 "
     "-x FUSEDCOLL_MPI_TRANSPORT=p2p -x FUSEDCOLL_TIMEOUT=2.5 python3 t.py"),
    # The caller's environment reaches local ranks by itself: no -x for it.
    ("-np 2 ./app", False, 2, {"FUSEDCOLL_TIMEOUT": "5"}, "-n 2 ./app"),
    # Everything after the program is the program's, fusedcoll-run's own flags included.
    ("-np 2 -- ./app -np 3 -H x --dry-run", False, 2, {},
     "-n 2 ./app -np 3 -H x --dry-run"),
    # -H naming this machine only: its slots, and yield when they outnumber the cores.
    ("-H localhost:4 ./app", False, 2, {},
     "-n 4 --host localhost:4 --mca mpi_yield_when_idle 1 ./app"),
    ("-H here:2 -np 1 ./app", False, 2, {}, "-n 1 --host here:2 ./app"),
    # Across hosts: TCP between them, shared memory within one, slots filled in order, and
    # the caller's FUSEDCOLL_* variables passed on to the other hosts' ranks.
    ("-np 4 -H a:2,b:2 ./app", True, 2, {},
     "-n 4 --allow-run-as-root --host a:2,b:2 --map-by slot --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma ./app"),
    ("-H a:2,b:2 ./app", False, 2, {"FUSEDCOLL_TIMEOUT": "5", "FUSEDCOLL_MPI_HOSTS": "0,1"},
     "-n 4 --host a:2,b:2 --map-by slot --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma -x FUSEDCOLL_MPI_HOSTS -x FUSEDCOLL_TIMEOUT ./app"),
    ("-H a,b,c ./app", False, 2, {}, "-n 3 --host a:1,b:1,c:1 --map-by slot "
     "--mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma ./app"),
    ("-np 2 -H a:2,b:2 --map-by node ./app", False, 2, {},
     "-n 2 --host a:2,b:2 --map-by node --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma ./app"),
    ("-np 4 -H here:2,b:2 --network-interface 10.0.0.0/24 --timeout 60 ./app", False, 2, {},
     "-n 4 --host here:2,b:2 --map-by slot --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma "
     "--mca btl_tcp_if_include 10.0.0.0/24 --mca oob_tcp_if_include 10.0.0.0/24 "
     "-x FUSEDCOLL_TIMEOUT=60 ./app"),
    # This machine's 4 ranks on its 2 cores yield even though its slots allow them.
    ("-H here:4,b:4 ./app", False, 2, {}, "-n 8 --host here:4,b:4 --map-by slot "
     "--mca btl self,vader,tcp --mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma "
     "--mca mpi_yield_when_idle 1 ./app"),
    ("-np 6 -H a:2,b:2 --oversubscribe ./app", False, 8, {},
     "-n 6 --host a:2,b:2 --map-by slot --oversubscribe --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma --mca mpi_yield_when_idle 1 ./app"),
    # rma across hosts: UCX, which Debian's configuration file turns off unless asked.
    ("-H a:1,b:1 --transport rma ./app", False, 2, {},
     "-n 2 --host a:1,b:1 --map-by slot --mca pml ucx --mca osc ucx "
     "-x FUSEDCOLL_MPI_TRANSPORT=rma ./app"),
    ("-H a:1,b:1 --transport auto ./app", False, 2, {},
     "-n 2 --host a:1,b:1 --map-by slot --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma -x FUSEDCOLL_MPI_TRANSPORT=auto ./app"),
    # The user's --mca replaces fusedcoll-run's own for the same key (Open MPI refuses a key
    # given twice); -x NAME=VALUE overrides --timeout's.
    ("-H a:1,b:1 --mca btl self,tcp --mca plm_rsh_agent rsh -x FUSEDCOLL_TIMEOUT=9 --timeout 3 "
     "-x OMP_NUM_THREADS ./app", False, 2, {},
     "-n 2 --host a:1,b:1 --map-by slot --mca btl_tcp_flags send,inplace,need-ack,need-csum,hetero-rdma --mca btl self,tcp "
     "--mca plm_rsh_agent rsh "
     "-x FUSEDCOLL_TIMEOUT=9 -x OMP_NUM_THREADS ./app"),
    # btl tcp's put back on: by --mca (the user's wins) or by the caller's environment, which
    # mpiexec passes on to every host and a --mca of fusedcoll-run's would override.
    ("-H a:1,b:1 --mca btl_tcp_flags send,put,inplace,need-ack,need-csum,hetero-rdma ./app",
     False, 2, {}, "-n 2 --host a:1,b:1 --map-by slot --mca btl self,vader,tcp "
     "--mca btl_tcp_flags send,put,inplace,need-ack,need-csum,hetero-rdma ./app"),
    ("-H a:1,b:1 ./app", False, 2, {"OMPI_MCA_btl_tcp_flags": "send,put"},
     "-n 2 --host a:1,b:1 --map-by slot --mca btl self,vader,tcp ./app"),
    ("-np 2 --mca mpi_yield_when_idle 0 ./app", False, 1, {},
     "-n 2 --oversubscribe --mca mpi_yield_when_idle 0 ./app"),
]


class DryRun(unittest.TestCase):
    def test_table(self):
        for argv, root, cores, env, expected in TABLE:
            with self.subTest(argv=argv, root=root, cores=cores, env=env):
                plan = run.plan_of(shlex.split(argv), environ=env, euid=0 if root else 1000,
                                   cores=cores, is_local=lambda host: host in LOCAL)
                self.assertEqual(shlex.join(plan.line), expected)

    def test_hostfile_formats(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as f:
            f.write("# cluster\nnode01 slots=4\nnode02:2   # horovodrun's form\n\nnode03\n"
                    "node04 slots=2 max_slots=4\n")
            f.flush()
            plan = run.plan_of(["--hostfile", f.name, "./app"], environ={}, euid=1000, cores=2,
                               is_local=lambda host: False)
            self.assertEqual(plan.np, 9)
            self.assertIn("--host node01:4,node02:2,node03:1,node04:2", shlex.join(plan.line))

    def test_placement(self):
        hosts = [("a", 2), ("b", 1), ("c", 3)]
        self.assertEqual(run.placement(hosts, 4, "slot"), [2, 1, 1])
        self.assertEqual(run.placement(hosts, 4, "node"), [2, 1, 1])
        self.assertEqual(run.placement(hosts, 5, "node"), [2, 1, 2])
        self.assertEqual(run.placement(hosts, 8, "slot"), [3, 2, 3])  # oversubscribed: wraps

    def test_command_line_prints_the_line(self):
        r = launch(["--dry-run", "-np", "1", "--timeout", "4", "./app", "x y"])
        self.assertEqual(r.returncode, 0, r.stderr)
        line = r.stdout.strip()
        self.assertTrue(line.startswith("mpiexec -n 1"), line)
        self.assertTrue(line.endswith("-x FUSEDCOLL_TIMEOUT=4 ./app 'x y'"), line)
        self.assertEqual(r.stderr, "")


def launch(argv, env=None):
    return subprocess.run([sys.executable, LAUNCHER] + argv, capture_output=True, text=True,
                          timeout=60, env=env)


# (arguments, exit status, what the one line on stderr must say)
ERRORS = [
    (["--dry-run", "./app"], 2, "-np is required without -H or --hostfile"),
    (["--dry-run", "-np", "2"], 2, "no program given"),
    (["--dry-run", "-np", "0", "./app"], 2, "-np must be at least 1, got 0"),
    (["--dry-run", "-np", "two", "./app"], 2, "invalid int value: 'two'"),
    (["--dry-run", "-np", "2", "--transport", "tcp", "./app"], 2,
     "--transport: invalid choice: 'tcp'"),
    (["--dry-run", "-np", "2", "--timeout", "0", "./app"], 2,
     "--timeout must be a positive number of seconds, got 0"),
    (["--dry-run", "-np", "2", "--bogus", "./app"], 2, "unrecognized arguments: --bogus"),
    (["--dry-run", "-np", "5", "-H", "a:2,b:2", "./app"], 2,
     "-np 5 is more than the 4 slots of the hosts (a:2,b:2): give more slots, or --oversubscribe"),
    (["--dry-run", "-H", "a:2,b:0", "./app"], 2, "host 'b': slots must be at least 1, got 0"),
    (["--dry-run", "-H", "a:two", "./app"], 2, "host 'a': slots 'two' is not a whole number"),
    (["--dry-run", "-H", "a:1,,b:1", "./app"], 2, "empty host entry"),
    (["--dry-run", "-H", "a:1,a:2", "./app"], 2, "host 'a' is listed twice"),
    (["--dry-run", "-H", "a", "--hostfile", "h", "./app"], 2,
     "argument --hostfile: not allowed with argument -H/--hosts"),
    (["--dry-run", "--hostfile", "/nonexistent/hosts", "./app"], 2,
     "--hostfile /nonexistent/hosts: No such file or directory"),
    (["--dry-run", "-np", "2", "-x", "1BAD=2", "./app"], 2, "-x '1BAD=2': not NAME or NAME=VALUE"),
    (["--dry-run", "-np", "2", "--network-interface", "eth0", "./app"], 2,
     "--network-interface: every rank runs on this machine"),
    # Past the arguments: what the job needs must be there.
    (["-np", "1", "/nonexistent/app"], 1, "program '/nonexistent/app' does not exist"),
    (["-np", "1", "fusedcoll-no-such-program"], 1,
     "program 'fusedcoll-no-such-program' not found on the PATH"),
    (["-np", "1", "--mpiexec", "/bin/true", "./app"], 1,
     "/bin/true is not Open MPI's mpiexec"),
    (["-np", "1", "--mpiexec", "/nonexistent/mpiexec", "./app"], 1,
     "--mpiexec /nonexistent/mpiexec: no such executable"),
    # .invalid never resolves (RFC 6761).
    (["-H", "localhost:1,no-such-host.invalid:1", "./app"], 1,
     "unknown host 'no-such-host.invalid': its name does not resolve"),
    # A host whose launch agent fails (here the agent is `false`): unreachable, named.
    (["-H", "localhost:1,10.213.255.254:1", "--mca", "plm_rsh_agent", "false", "./app"], 1,
     "host '10.213.255.254' is unreachable: 'false 10.213.255.254 true' failed (exit 1)"),
    (["-H", "localhost:1,10.213.255.254:1", "--mca", "plm_rsh_agent", "fusedcoll-no-agent",
      "./app"], 1, "fusedcoll-no-agent not found: Open MPI starts its daemons on other hosts"),
]


class Errors(unittest.TestCase):
    def check(self, argv, status, says, env=None):
        r = launch(argv, env)
        lines = r.stderr.splitlines()
        self.assertEqual(r.returncode, status, f"{argv}: {r.stderr}")
        self.assertEqual(len(lines), 1, f"{argv}: stderr is not one line: {r.stderr!r}")
        self.assertTrue(lines[0].startswith("fusedcoll-run: "), lines[0])
        self.assertIn(says, lines[0])
        self.assertEqual(r.stdout, "")

    def test_errors(self):
        for argv, status, says in ERRORS:
            with self.subTest(argv=argv):
                self.check(argv, status, says)

    def test_no_mpiexec(self):
        with tempfile.TemporaryDirectory() as empty:
            env = dict(os.environ, PATH=empty)
            self.check(["-np", "2", "./app"], 1, "mpiexec not found on the PATH", env)
            # A dry run only prints: it needs no mpiexec.
            r = launch(["--dry-run", "-np", "1", "./app"], env)
            self.assertEqual((r.returncode, r.stdout.split()[:3]), (0, ["mpiexec", "-n", "1"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        LAUNCHER = sys.argv.pop(1)
    run = load(LAUNCHER)
    unittest.main()
