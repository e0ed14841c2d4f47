"""Loads the operator library, ``libfusedcoll_torch.so``, which lies next to this file, and
registers its operators as ``torch.ops.fusedcoll.*``."""

import os

import torch

LIBRARY_NAME = "libfusedcoll_torch.so"
LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)

if not os.path.exists(LIBRARY_PATH):
    raise ImportError(
        f"fusedcoll: {LIBRARY_PATH} is missing. Install the package with python3 -m pip install "
        "<checkout> (docs/pytorch.md, \"Install\"), or build the PyTorch component (cmake with "
        "FUSEDCOLL_ENABLE_TORCH=AUTO or ON) and put <build>/python, or "
        "<prefix>/lib/python3/dist-packages after cmake --install, on PYTHONPATH.")

torch.ops.load_library(LIBRARY_PATH)

#: The operators: ``ops.all_reduce(...)`` is ``torch.ops.fusedcoll.all_reduce(...)``.
ops = torch.ops.fusedcoll
