"""fusedcoll's oracle (``ref/``) from Python: each function takes the inputs of every rank of one
world (a list, index = rank) and returns every rank's output, computed sequentially in the pinned
order of docs/semantics.md. The distributed calls of ``fusedcoll`` give these bits."""

from . import _errors
from ._library import ops
from ._wire import as_wire as _wire


__all__ = ["all_reduce", "all_to_all", "reduce_scatter", "all_gather", "broadcast"]


@_errors.translated
def all_reduce(inputs, op="sum", *, algo="direct", wire=None):
    return ops.ref_all_reduce(list(inputs), op, algo, *_wire(wire).args())


@_errors.translated
def all_to_all(inputs, send_counts=None, *, wire=None):
    """``send_counts[r][q]``: rows rank r sends to rank q (default: even splits)."""
    flat = None if send_counts is None else [int(c) for row in send_counts for c in row]
    return ops.ref_all_to_all(list(inputs), flat, *_wire(wire).args())


@_errors.translated
def reduce_scatter(inputs, counts=None, op="sum", *, wire=None):
    return ops.ref_reduce_scatter(list(inputs), counts, op, *_wire(wire).args())


@_errors.translated
def all_gather(inputs, *, wire=None):
    """Every rank's rows concatenated; the counts are the inputs' own row counts."""
    return ops.ref_all_gather(list(inputs), *_wire(wire).args())


@_errors.translated
def broadcast(inputs, root=0):
    return ops.ref_broadcast(list(inputs), root)
