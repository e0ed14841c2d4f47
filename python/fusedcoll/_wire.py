"""``Wire``: the wire compression options of a collective, as the operators take them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Wire:
    """Wire compression of a collective (C++ ``CompressionOptions``, docs/compression.md).

    ``format``: ``"none"`` (plain f32), ``"f16"``, ``"bf16"``, ``"fp8_e4m3"``, ``"fp8_e5m2"``.
    Reductions still run in f32; only what travels between ranks is narrower. Every rank must
    pass the same options.
    """
    format: str = "none"
    overflow: str = "saturate"   # or "ieee"
    scaling: str = "automatic"   # "none", "per_tensor", "per_block"
    block: int = 256             # elements per scale with scaling="per_block"
    pow2_scale: bool = False
    predivide: bool = False      # op="avg": divide every contribution by P before the sum

    def args(self):
        return (self.format, self.overflow, self.scaling, self.block, self.pow2_scale,
                self.predivide)


def as_wire(wire):
    if wire is None:
        return Wire()
    if isinstance(wire, str):
        return Wire(format=wire)
    if isinstance(wire, Wire):
        return wire
    raise TypeError(f"fusedcoll: wire must be None, a format name or a fusedcoll.Wire, "
                    f"got {type(wire).__name__}")
