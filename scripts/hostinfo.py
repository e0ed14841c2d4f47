"""What the measuring scripts (results, validate-model, calibrate-host-preset) read about the
machine and about preset files, in one place, so that their CSVs name a machine the same way."""

import os
import platform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def repo_relative(path):
    """`path` (absolute, or relative to the working directory) relative to the repository where
    it lies inside it, else absolute: what a committed CSV or calibration records must not name
    one machine's directories."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else full


def cpu_model():
    """The CPU's model name (lscpu's "Model name", from /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def preset_values(text):
    """{field: value text} of a preset's non-comment lines (field names are unique across its
    sections)."""
    out = {}
    for line in text.split("\n"):
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (t.strip() for t in line.split("=", 1))
            out[k] = v
    return out
