"""The build backend of ``python3 -m pip install .`` (pyproject.toml; docs/pytorch.md, "Install").

CMake builds the PyTorch component's operator library (target ``fusedcoll_torch``, Release) and
this module writes the wheel with Python's standard library alone, so pip's isolated build needs
nothing from PyPI (``requires = []``). The wheel holds the package ``fusedcoll`` (python/fusedcoll
and the library), and ``fusedcoll-run`` (launcher/) as a console script.

The build directory: ``FUSEDCOLL_BUILD_DIR`` or ``--config-settings build-dir=DIR``, an existing
build directory with the PyTorch component, used as it is configured (only the target is built,
e.g. the one the tests run from); otherwise ``build-pip/`` in the source tree, configured for the
component alone and kept, so a second install rebuilds only what changed.
"""

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "fusedcoll"
LIBRARY = "libfusedcoll_torch.so"
DEFAULT_BUILD_DIR = "build-pip"
# A fixed time for every entry: the same inputs give the same wheel.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class BuildError(Exception):
    """What the build needs and does not have: the message is all the user sees."""


def _fail_clearly(hook):
    def wrapped(*args, **kwargs):
        try:
            return hook(*args, **kwargs)
        except BuildError as e:
            print(f"fusedcoll: {e}", file=sys.stderr)
            raise SystemExit(1) from None
    wrapped.__name__ = hook.__name__
    wrapped.__doc__ = hook.__doc__
    return wrapped


# --- metadata -----------------------------------------------------------------------------------

def project():
    """Version and summary from the top-level CMakeLists.txt, their one home."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'project\(\s*fusedcoll\s+VERSION\s+([0-9.]+)[^)]*DESCRIPTION\s+"([^"]*)"', text)
    if not m:
        raise BuildError("cannot read project(fusedcoll VERSION ... DESCRIPTION ...) in "
                         "CMakeLists.txt")
    return m.group(1), m.group(2)


def dist_info_name():
    version, _ = project()
    return f"{NAME}-{version}.dist-info"


def metadata_text():
    version, summary = project()
    # No Requires-Dist for torch and numpy: the library is linked against the libtorch CMake
    # found (Debian's, seen from a virtual environment made with --system-site-packages), and pip
    # must not fetch another torch, whose ABI would differ. build_wheel checks the import instead.
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {summary}\n"
            "Requires-Python: >=3.8\n")


def wheel_tag():
    # The library links libtorch, not Python: any Python 3 of this platform that imports this
    # torch can load it.
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{platform}"


def dist_info_files():
    return {
        "METADATA": metadata_text(),
        "WHEEL": (f"Wheel-Version: 1.0\nGenerator: fusedcoll_build (python/pep517)\n"
                  f"Root-Is-Purelib: false\nTag: {wheel_tag()}\n"),
        "entry_points.txt": "[console_scripts]\nfusedcoll-run = fusedcoll_run:main\n",
        "top_level.txt": "fusedcoll\nfusedcoll_run\n",
    }


# --- the CMake build ----------------------------------------------------------------------------

def user_environment():
    """The environment without what pip's isolated build adds (a PYTHONPATH entry under its
    pip-build-env-* directory whose sitecustomize hides site-packages, and PYTHONNOUSERSITE):
    CMake must see the interpreter as the user runs it, torch included."""
    env = dict(os.environ)
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    kept = [p for p in entries if "pip-build-env-" not in p]
    if kept != entries:
        env.pop("PYTHONNOUSERSITE", None)
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            env.pop("PYTHONPATH", None)
    return env


def read_cache(build_dir):
    values = {}
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"([A-Za-z0-9_]+):[A-Z]+=(.*)", line)
                if m:
                    values[m.group(1)] = m.group(2)
    except FileNotFoundError:
        return None
    return values


def run(cmd, env):
    print("fusedcoll: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        rc = subprocess.call(cmd, env=env, stdout=sys.stderr)
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e}") from None
    if rc != 0:
        raise BuildError(f"'{' '.join(cmd)}' failed (exit status {rc}); its output is above")


def check_python(env):
    """The interpreter that installs the package must import torch and numpy."""
    r = subprocess.run([sys.executable, "-c", "import torch, numpy"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        said = (r.stderr.strip().splitlines() or [""])[-1]
        raise BuildError(
            f"{sys.executable} cannot import torch and numpy ({said}). On Debian 12: apt-get "
            "install python3-torch python3-numpy libtorch-dev (scripts/setup.sh --torch), and make "
            "the virtual environment with /usr/bin/python3 -m venv --system-site-packages")


def build_library(config_settings):
    """Builds the operator library and returns the build directory."""
    env = user_environment()
    check_python(env)
    cmake = shutil.which("cmake")
    if not cmake:
        raise BuildError("cmake not found on the PATH (Debian 12: apt-get install cmake g++; "
                         "scripts/setup.sh --torch)")
    given = (config_settings or {}).get("build-dir") or os.environ.get("FUSEDCOLL_BUILD_DIR")
    build_dir = os.path.abspath(given or os.path.join(ROOT, DEFAULT_BUILD_DIR))
    cache = read_cache(build_dir)
    home = cache and cache.get("CMAKE_HOME_DIRECTORY")
    if cache is not None and os.path.realpath(home or "") != os.path.realpath(ROOT):
        if given:
            raise BuildError(f"build directory {build_dir} belongs to the sources in {home}, "
                             f"not {ROOT}")
        shutil.rmtree(build_dir)  # ours, from a checkout that has moved
        cache = None
    if cache is None:
        if given and os.path.exists(build_dir) and os.listdir(build_dir):
            raise BuildError(f"build directory {build_dir} is not empty and not a CMake build "
                             "directory")
        configure = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DFUSEDCOLL_ENABLE_TORCH=ON", f"-DFUSEDCOLL_TORCH_PYTHON={sys.executable}",
                     "-DFUSEDCOLL_BUILD_TESTS=OFF", "-DFUSEDCOLL_BUILD_BENCH=OFF",
                     "-DFUSEDCOLL_BUILD_EXAMPLES=OFF", "-DFUSEDCOLL_ENABLE_SIM=OFF"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        run(configure, env)
    elif "FUSEDCOLL_TORCH_PYTHON_EXE" not in cache:
        raise BuildError(f"build directory {build_dir} was configured without the PyTorch "
                         "component (its configure step says why; -DFUSEDCOLL_ENABLE_TORCH=ON "
                         "makes that an error)")
    jobs = env.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    run([cmake, "--build", build_dir, "--target", "fusedcoll_torch", "--parallel", jobs], env)
    return build_dir


# --- the wheel ----------------------------------------------------------------------------------

def package_files(build_dir):
    """(path in the wheel, path on disk) of everything but the .dist-info."""
    package = os.path.join(ROOT, "python", NAME)
    files = [(f"{NAME}/{name}", os.path.join(package, name))
             for name in sorted(os.listdir(package)) if name.endswith(".py")]
    library = os.path.join(build_dir, "python", NAME, LIBRARY)
    if not os.path.isfile(library):
        raise BuildError(f"the build did not produce {library}")
    files.append((f"{NAME}/{LIBRARY}", library))
    files.append(("fusedcoll_run.py", os.path.join(ROOT, "launcher", "fusedcoll-run")))
    return files


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def write_wheel(wheel_directory, build_dir):
    version, _ = project()
    wheel_name = f"{NAME}-{version}-{wheel_tag()}.whl"
    info = dist_info_name()
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         compression=zipfile.ZIP_DEFLATED) as wheel:
        def add(arcname, data, mode=0o644):
            entry = zipfile.ZipInfo(arcname, ZIP_TIME)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
            records.append(record_line(arcname, data))

        for arcname, path in package_files(build_dir):
            with open(path, "rb") as f:
                add(arcname, f.read(), 0o755 if arcname.endswith(".so") else 0o644)
        for name, text in dist_info_files().items():
            add(f"{info}/{name}", text.encode())
        records.append(f"{info}/RECORD,,")
        entry = zipfile.ZipInfo(f"{info}/RECORD", ZIP_TIME)
        entry.external_attr = 0o100644 << 16
        wheel.writestr(entry, "\n".join(records) + "\n")
    return wheel_name


# --- PEP 517 hooks ------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


@_fail_clearly
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = dist_info_name()
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, text in dist_info_files().items():
        with open(os.path.join(metadata_directory, info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return info


@_fail_clearly
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return write_wheel(wheel_directory, build_library(config_settings))


def source_files():
    """The tracked files (git), or else every file outside build directories and caches."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
        return sorted(p for p in out.decode().split("\0") if p and os.path.isfile(
            os.path.join(ROOT, p)))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not (d.startswith(("build", ".")) or
                                                 d in ("__pycache__", "data")))
        files += [os.path.relpath(os.path.join(top, n), ROOT) for n in sorted(names)]
    return files


@_fail_clearly
def build_sdist(sdist_directory, config_settings=None):
    version, _ = project()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) \
            as tar:
        for path in source_files():
            tar.add(os.path.join(ROOT, path), arcname=f"{base}/{path}", recursive=False)
        data = metadata_text().encode()
        entry = tarfile.TarInfo(f"{base}/PKG-INFO")
        entry.size = len(data)
        entry.mode = 0o644
        tar.addfile(entry, io.BytesIO(data))
    return name
