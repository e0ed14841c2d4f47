"""A Horovod-compatible training API on fusedcoll (docs/pytorch.md, "Training").

A Horovod PyTorch script ports by changing its import::

    import fusedcoll.torch as hvd          # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.fp16, op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Differences from Horovod that a script can see:

- The gradient exchange is synchronous, in ``step()`` (or ``synchronize()``): every gradient of
  the optimizer goes into one flat float32 buffer, which one ``fusedcoll.all_reduce`` averages.
  Several ``backward()`` calls before one ``step()`` are therefore exchanged once, whatever
  ``backward_passes_per_step`` says.
- The built-in compressors do not reduce in 16 or 8 bits as Horovod's fp16 does: the reduction
  runs in float32 and only the wire is narrow (fusedcoll's compressed AllReduce, FP8 scaled by
  the amax every rank agrees on, each contribution divided by P first: docs/compression.md).
  Their ``compress``/``decompress`` also work alone, with Horovod's signatures. A user-written
  compressor (any class with ``compress(tensor) -> (tensor, ctx)`` and
  ``decompress(tensor, ctx)``, as in the course lab) is honoured too: its payloads travel by
  ``all_gather`` and every rank decodes and sums them in float32, in rank order.
- Parameters and gradients must be float32 CPU tensors.
"""

import os

import torch

import fusedcoll as _fc
from fusedcoll import (Error, InvalidArgument, NotInitializedError, TimeoutError,  # noqa: F401
                       UnsupportedError)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "Average", "Sum", "Compression", "Compressor",
    "allreduce", "allreduce_", "allgather", "broadcast", "broadcast_",
    "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "DDPHookState", "ddp_comm_hook",
]

# Horovod's reduction op constants.
Average = "avg"
Sum = "sum"


# --- Process set ---------------------------------------------------------------------------------

def init(**options):
    """``fusedcoll.init("mpi", **options)``: one rank per process (run under ``mpiexec``; a
    process started alone is a world of one). Inside ``fusedcoll.run`` (the emulator) the ranks
    already exist and this does nothing."""
    if _fc.backend() == "emu":
        return
    _fc.init("mpi", **options)


def shutdown():
    """``fusedcoll.finalize()`` (it also runs at interpreter exit)."""
    if _fc.backend() == "mpi":
        _fc.finalize()


is_initialized = _fc.is_initialized
rank = _fc.rank
size = _fc.size


def local_rank():
    """The rank on this host: Open MPI's ``OMPI_COMM_WORLD_LOCAL_RANK``, else ``rank()``."""
    value = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
    return int(value) if value is not None and _fc.backend() == "mpi" else rank()


def local_size():
    """The ranks on this host: Open MPI's ``OMPI_COMM_WORLD_LOCAL_SIZE``, else ``size()``."""
    value = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    return int(value) if value is not None and _fc.backend() == "mpi" else size()


# --- Compression -------------------------------------------------------------------------------

class Compressor:
    """Horovod's interface: ``compress(tensor) -> (tensor, ctx)``, ``decompress(tensor, ctx)``.

    ``wire`` names the fusedcoll wire format the gradient exchange uses for this compressor
    (``None`` for a user-written compressor: then its own ``compress``/``decompress`` run)."""
    wire = None

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression: the tensor travels as it is."""
    wire = "none"

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _check_f32(tensor, who):
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
        got = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise InvalidArgument(f"fusedcoll.torch.Compression.{who}.compress: needs a float32 "
                              f"tensor, got {got}")


class _Codec(Compressor):
    """fusedcoll's codec of ``wire``; FP8 with a per-tensor scale from the tensor's amax."""
    scaled = False

    @classmethod
    def compress(cls, tensor):
        _check_f32(tensor, cls.__name__)
        flat = tensor.contiguous().reshape(-1)
        scale = None
        if cls.scaled:
            amax = float(_fc.block_amax(flat, 0)[0]) if flat.numel() else 0.0
            scale = _fc.scale_for(cls.wire, amax)
        return _fc.encode(flat, cls.wire, scale).reshape(tensor.shape), (tensor.dtype, scale)

    @classmethod
    def decompress(cls, tensor, ctx):
        dtype, scale = ctx
        return _fc.decode(tensor.contiguous().reshape(-1), cls.wire, scale) \
            .reshape(tensor.shape).to(dtype)


class FP16Compressor(_Codec):
    """IEEE binary16 on the wire (round to nearest even, saturating)."""
    wire = "f16"


class BF16Compressor(_Codec):
    """bfloat16 on the wire."""
    wire = "bf16"


class FP8E4M3Compressor(_Codec):
    """OCP FP8 E4M3 (payloads are uint8), scaled per tensor by the amax."""
    wire = "fp8_e4m3"
    scaled = True


class FP8E5M2Compressor(_Codec):
    """OCP FP8 E5M2 (payloads are uint8), scaled per tensor by the amax."""
    wire = "fp8_e5m2"
    scaled = True


class Compression:
    """Horovod's ``Compression``: the compressors by name."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    fp8_e4m3 = FP8E4M3Compressor
    fp8_e5m2 = FP8E5M2Compressor


def _wire_of(compression, op):
    if getattr(compression, "wire", None) is None:
        return None
    # As examples/mnist: an average divides each contribution by P before the sum, so FP8's
    # partial sums stay inside the agreed scale.
    return _fc.Wire(format=compression.wire, predivide=(op == Average))


# --- Collectives with Horovod's names ----------------------------------------------------------

def _op_of(average, op):
    if op is None:
        op = Average if average is None or average else Sum
    if op not in (Average, Sum, "min", "max"):
        raise InvalidArgument(f"fusedcoll.torch: op '{op}' is not Average, Sum, 'min' or 'max'")
    return op


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None):
    """A new tensor: the reduction of ``tensor`` over ranks (default: the average)."""
    out = tensor.detach().clone()
    return allreduce_(out, average=average, name=name, compression=compression, op=op)


def allreduce_(tensor, average=None, name=None, compression=Compression.none, op=None):
    """``allreduce`` in place; returns ``tensor``. ``name`` is accepted and ignored."""
    del name
    op = _op_of(average, op)
    wire = _wire_of(compression, op)
    if wire is None:
        raise UnsupportedError("fusedcoll.torch.allreduce: a user-written compressor works only "
                               "in DistributedOptimizer (pass a Compression.* one here)")
    with torch.no_grad():
        return _fc.all_reduce_(tensor.detach(), op, wire=None if wire.format == "none" else wire)


def allgather(tensor, name=None):
    """Every rank's ``tensor`` concatenated along dimension 0, in rank order."""
    del name
    return _fc.all_gather(tensor.detach())


def broadcast(tensor, root_rank, name=None):
    """A new tensor holding ``root_rank``'s ``tensor``."""
    del name
    return _fc.broadcast(tensor.detach(), root_rank)


def broadcast_(tensor, root_rank, name=None):
    """``broadcast`` in place; returns ``tensor``."""
    del name
    with torch.no_grad():
        _fc.broadcast_(tensor.detach(), root_rank)
    return tensor


# --- Broadcasting model and optimizer state ----------------------------------------------------

def broadcast_parameters(params, root_rank=0):
    """Copies ``root_rank``'s tensors into every rank's, in place. ``params``: a ``state_dict()``
    or ``named_parameters()`` (any iterable of ``(name, tensor)``). Every rank must pass the same
    names, shapes and dtypes (a shape that differs is fusedcoll's ``InvalidArgument`` on every
    rank)."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    for name, tensor in items:
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgument(f"fusedcoll.torch.broadcast_parameters: '{name}' is a "
                                  f"{type(tensor).__name__}, not a tensor")
        broadcast_(tensor, root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Copies ``root_rank``'s optimizer state into every rank's: the hyper-parameters of every
    parameter group (numbers) and every state tensor. The state must have the same structure on
    every rank (as it has when every rank built the same optimizer and stepped equally often; at
    the start, before the first step, SGD's state is empty everywhere)."""
    numbers = []
    for group in optimizer.param_groups:
        for key in sorted(group):
            if key != "params" and isinstance(group[key], (int, float)) \
                    and not isinstance(group[key], bool):
                numbers.append((group, key))
    if numbers:
        values = torch.tensor([float(g[k]) for g, k in numbers], dtype=torch.float64)
        broadcast_(values, root_rank)
        for (group, key), value in zip(numbers, values.tolist()):
            group[key] = type(group[key])(value)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    layout = torch.tensor([len(optimizer.state.get(p, {})) for p in params], dtype=torch.int64)
    root_layout = broadcast(layout, root_rank)
    # Every rank learns whether any rank differs, so that all raise and none waits for the
    # broadcasts below.
    differs = torch.tensor([0 if torch.equal(layout, root_layout) else 1], dtype=torch.int32)
    if _fc.all_reduce(differs, "max").item():
        raise InvalidArgument("fusedcoll.torch.broadcast_optimizer_state: the optimizer state of "
                              f"some rank has another structure than root rank {root_rank}'s "
                              f"(entries per parameter here {layout.tolist()}, on the root "
                              f"{root_layout.tolist()})")
    for p in params:
        state = optimizer.state.get(p, {})
        for key in sorted(state):
            value = state[key]
            if isinstance(value, torch.Tensor):
                broadcast_(value, root_rank)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                t = broadcast(torch.tensor([float(value)], dtype=torch.float64), root_rank)
                state[key] = type(value)(t.item())


# --- DistributedOptimizer ----------------------------------------------------------------------

class _ErrorFeedback:
    """One rank's residual of the flat gradient (C++ ``fusedcoll::ErrorFeedback``): ``apply``
    adds it, ``update`` stores what the wire lost, non-finite entries as 0."""

    def __init__(self):
        self.residual = None

    def apply(self, x):
        if self.residual is None:
            self.residual = torch.zeros_like(x)
        elif self.residual.shape != x.shape:
            raise InvalidArgument(f"fusedcoll.torch: error feedback holds {self.residual.numel()} "
                                  f"elements, the gradient now has {x.numel()}")
        x.add_(self.residual)

    def update(self, sent, received):
        torch.sub(sent, received, out=self.residual)
        self.residual.masked_fill_(~torch.isfinite(self.residual), 0.0)


def _delivered(sent, wire):
    """What the compressed AllReduce keeps of this rank's contribution, computed as it quantizes
    (examples/mnist/trainer.cpp, ``delivered``): divided by P, encoded with the scale of the amax
    every rank agrees on (one single-float max-AllReduce; headroom P for the sum), decoded, times
    P."""
    p = size()
    y = sent / float(p)
    scale = None
    if wire.format.startswith("fp8"):
        amax = _fc.all_reduce(y.abs().max().reshape(1), "max")
        scale = _fc.scale_for(wire.format, float(amax[0]), float(p), wire.pow2_scale)
    q = _fc.decode(_fc.encode(y, wire.format, scale, wire.overflow), wire.format, scale)
    return q.mul_(float(p))


def _exchange(flat, wire, op, algo, feedback):
    """Reduces the flat f32 gradient ``flat`` over the ranks in place: one AllReduce with
    ``wire``; with ``feedback`` (an ``_ErrorFeedback``) the residual is added first and what the
    wire lost stored afterwards."""
    if feedback is not None:
        feedback.apply(flat)
        sent = flat.clone()
        received = _delivered(sent, wire)
    _fc.all_reduce_(flat, op, algo=algo,
                    wire=wire if wire.format != "none" or wire.predivide else None)
    if feedback is not None:
        feedback.update(sent, received)


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 error_feedback, algo):
        super(self.__class__, self).__init__(params)
        self._fc_setup(named_parameters, compression, backward_passes_per_step, op,
                       error_feedback, algo)

    def _fc_setup(self, named_parameters, compression, backward_passes_per_step, op,
                  error_feedback, algo):
        op = _op_of(None, op)
        if op not in (Average, Sum):
            raise InvalidArgument(f"fusedcoll.torch.DistributedOptimizer: op must be Average or "
                                  f"Sum, got '{op}'")
        if not (isinstance(compression, type) or hasattr(compression, "compress")):
            raise InvalidArgument("fusedcoll.torch.DistributedOptimizer: compression must be a "
                                  "Compressor (compress/decompress)")
        if backward_passes_per_step < 1:
            raise InvalidArgument("fusedcoll.torch.DistributedOptimizer: backward_passes_per_step "
                                  f"must be >= 1, got {backward_passes_per_step}")
        wire = _wire_of(compression, op)
        if error_feedback and (wire is None or wire.format == "none"):
            raise InvalidArgument("fusedcoll.torch.DistributedOptimizer: error_feedback needs a "
                                  "built-in compressing Compression (fp16, bf16, fp8_*): nothing "
                                  "is lost in float32")
        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                dups = sorted({n for n in names if names.count(n) > 1})
                raise InvalidArgument(f"fusedcoll.torch.DistributedOptimizer: parameter names "
                                      f"appear more than once: {dups}")
            known = {id(p) for _, p in named}
            missing = sum(1 for p in params if id(p) not in known)
            if missing:
                raise InvalidArgument(f"fusedcoll.torch.DistributedOptimizer: {missing} "
                                      "parameter(s) of the optimizer are not in named_parameters")
        for p in params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise InvalidArgument(f"fusedcoll.torch.DistributedOptimizer: parameters must be "
                                      f"float32 CPU tensors, got {p.dtype} on {p.device}")
        self._fc_compression = compression
        self._fc_wire = wire
        self._fc_op = op
        self._fc_algo = algo
        self._fc_feedback = _ErrorFeedback() if error_feedback else None
        self._fc_flat = None
        self._fc_skip = False
        self.backward_passes_per_step = backward_passes_per_step

    def _fc_params(self):
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def synchronize(self):
        """Averages (or sums) every gradient over the ranks now, through one flat buffer."""
        params = self._fc_params()
        total = sum(p.numel() for p in params)
        if self._fc_flat is None or self._fc_flat.numel() != total:
            self._fc_flat = torch.empty(total, dtype=torch.float32)
        flat = self._fc_flat
        views, offset = [], 0
        with torch.no_grad():
            for p in params:
                view = flat[offset:offset + p.numel()]
                offset += p.numel()
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad.reshape(-1))
                views.append(view)
            self._fc_exchange(flat)
            for p, view in zip(params, views):
                if p.grad is None:
                    p.grad = view.reshape(p.shape).clone()
                else:
                    p.grad.copy_(view.reshape(p.shape))

    def _fc_exchange(self, flat):
        if size() == 1 and self._fc_feedback is None:
            return
        if self._fc_wire is None:
            self._fc_exchange_custom(flat)
            return
        _exchange(flat, self._fc_wire, self._fc_op, self._fc_algo, self._fc_feedback)

    def _fc_exchange_custom(self, flat):
        # The lab's scheme (Horovod's allgather of compressed payloads): every rank's payload
        # travels as bytes, every rank decodes each with its own ctx and sums in f32, rank order.
        payload, ctx = self._fc_compression.compress(flat)
        payload = payload.contiguous()
        raw = payload.reshape(-1).view(torch.uint8) if payload.dtype != torch.uint8 \
            else payload.reshape(-1)
        gathered = _fc.all_gather(raw).reshape(size(), -1)
        total = torch.zeros_like(flat)
        for r in range(size()):
            part = gathered[r].view(payload.dtype).reshape(payload.shape)
            total.add_(self._fc_compression.decompress(part, ctx).reshape(-1).to(torch.float32))
        if self._fc_op == Average:
            total.div_(float(size()))
        flat.copy_(total)

    def skip_synchronize(self):
        """Context manager: ``step()`` inside it does not exchange again (after an explicit
        ``synchronize()``, e.g. to clip the averaged gradients)."""
        optimizer = self

        class _Skip:
            def __enter__(self):
                optimizer._fc_skip = True

            def __exit__(self, *exc):
                optimizer._fc_skip = False

        return _Skip()

    def step(self, closure=None):
        if not self._fc_skip:
            self.synchronize()
        return super(self.__class__, self).step(closure)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, *, error_feedback=False,
                         algo="direct"):
    """Wraps ``optimizer`` (Horovod's signature): its ``step()`` first averages the gradients
    over every rank (``op=Sum``: sums) through one flat float32 buffer and one fusedcoll
    AllReduce, with ``compression`` on the wire, then runs the wrapped optimizer's step. The
    result is an instance of the optimizer's own class (state, ``param_groups``,
    ``state_dict()`` as usual).

    fusedcoll additions: ``error_feedback=True`` (with a compressing built-in compressor) adds
    what the wire lost of this rank's previous gradient to the next one, as examples/mnist's
    ``--error-feedback``; ``algo``: the AllReduce algorithm, ``"direct"``, ``"ring"`` or
    ``"chain"``.
    """
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, error_feedback, algo)


# --- DDP communication hook ----------------------------------------------------------------------

class DDPHookState:
    """The state of ``ddp_comm_hook``: the compressor whose wire the buckets use, the AllReduce
    algorithm, and with ``error_feedback`` one residual per bucket (kept here, by bucket index)."""

    def __init__(self, compression=Compression.none, error_feedback=False, algo="direct"):
        self.wire = _wire_of(compression, Average)
        if self.wire is None:
            raise UnsupportedError("fusedcoll.torch.DDPHookState: only the built-in Compression.* "
                                   "compressors work in the DDP hook")
        if error_feedback and self.wire.format == "none":
            raise InvalidArgument("fusedcoll.torch.DDPHookState: error_feedback needs a "
                                  "compressing Compression (fp16, bf16, fp8_*)")
        self.algo = algo
        self.feedback = {} if error_feedback else None


def ddp_comm_hook(state, bucket):
    """A ``DistributedDataParallel`` communication hook: averages the bucket's flat gradient with
    fusedcoll's AllReduce (in place) instead of the process group's::

        model = DistributedDataParallel(model)          # torch.distributed initialised (Gloo)
        model.register_comm_hook(DDPHookState(Compression.fp8_e4m3), ddp_comm_hook)

    ``state``: a ``DDPHookState`` (``None``: f32). DDP still needs its process group for its own
    set-up broadcasts; the gradients go through fusedcoll, which must be initialised too."""
    if state is None:
        state = DDPHookState()
    flat = bucket.buffer()
    if flat.dtype != torch.float32:
        raise InvalidArgument(f"fusedcoll.torch.ddp_comm_hook: the bucket holds {flat.dtype}; "
                              "fusedcoll reduces float32 gradients")
    feedback = None
    if state.feedback is not None:
        feedback = state.feedback.setdefault(bucket.index(), _ErrorFeedback())
    with torch.no_grad():
        _exchange(flat, state.wire, Average, state.algo, feedback)
    future = torch.futures.Future()
    future.set_result(flat)
    return future
