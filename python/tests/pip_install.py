"""``python3 -m pip install .`` as a user types it (ctest torch_pip_install; docs/pytorch.md,
"Install"): into a scratch virtual environment made with --system-site-packages (so Debian's torch
is seen), with FUSEDCOLL_BUILD_DIR naming this build directory so nothing is compiled again. Then,
from /, with no PYTHONPATH: ``import fusedcoll`` comes from the environment and runs an AllReduce
and a codec round trip, and the environment's ``fusedcoll-run`` starts
python/bench/allreduce_overhead.py on 2 ranks.

    pip_install.py SOURCE_DIR BUILD_DIR WORK_DIR

Exits 77 (CTest's skip) where Python has no venv module with pip (Debian: python3-venv).
"""

import os
import shutil
import subprocess
import sys

CHECK = r"""
import os, sys, torch
import fusedcoll, fusedcoll.torch
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(fusedcoll.__file__)
assert where.startswith(venv + os.sep), f"fusedcoll imported from {where}, not from {venv}"
out = fusedcoll.run(lambda r: fusedcoll.all_reduce(torch.ones(3) * (r + 1)), world_size=2,
                    compute_units=1)
assert all(torch.equal(o, torch.full((3,), 3.0)) for o in out), out
x = torch.tensor([0.5, -3.0])
assert torch.equal(fusedcoll.decode(fusedcoll.encode(x, "fp8_e4m3"), "fp8_e4m3"), x)
print("pip_install: fusedcoll imported from", os.path.dirname(where))
"""


def run(cmd, env, cwd="/", timeout=600):
    print("+ " + " ".join("<check>" if "\n" in a else a for a in cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"pip_install: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def main():
    source, build, work = sys.argv[1:4]
    try:
        import ensurepip  # noqa: F401
    except ImportError:
        print(f"pip_install: skipped: {sys.executable} has no ensurepip, so python3 -m venv makes "
              "no pip (Debian: apt-get install python3-venv; scripts/setup.sh --torch)")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], env)
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", source],
        dict(env, FUSEDCOLL_BUILD_DIR=build), cwd=work)
    print(run([python, "-c", CHECK, venv], env), end="")
    out = run([os.path.join(venv, "bin", "fusedcoll-run"), "--timeout", "20", "-np", "2", python,
               os.path.join(source, "python", "bench", "allreduce_overhead.py"), "--sizes", "4K",
               "--rounds", "1", "--warmup", "0"], env, timeout=120)
    if "| 4096 |" not in out:
        sys.exit(f"pip_install: allreduce_overhead.py printed no row for 4 KiB:\n{out}")
    print(out, end="")
    shutil.rmtree(work)
    print("pip_install: PASS")


if __name__ == "__main__":
    main()
