#pragma once
/// @file
/// The compressed wire as ref/ and every backend see it: amax tables, the agreed scales, and the
/// encode/decode of a run of elements at a known index. Compiled once (core/compression.cpp), so
/// every backend scales, encodes and decodes with the same bits. Semantics: docs/compression.md.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/compression.hpp"

namespace fusedcoll::detail {

/// The scales of one compressed call, identical on every rank.
struct WirePlan {
  WireFormat format = WireFormat::none;
  Overflow overflow = Overflow::saturate;
  std::int64_t block = 0;     ///< elements per scale; 0: `scales[0]` for every element
  std::vector<float> scales;  ///< empty: unscaled
  std::size_t elem() const { return wire_size(format); }
};

/// An amax table of `opts` (empty when unscaled); element index `i` falls in entry
/// `i / opts.block` (per block) or entry 0 (per tensor). Entries start at 0.
std::vector<float> empty_amax(const CompressionOptions& opts);

/// Folds `|x[i]|` for the elements `x[0 .. n)`, whose indices are `first .. first + n`, into
/// `table` (grown as needed). NaN-propagating: a NaN element makes its entry NaN.
void accumulate_amax(const CompressionOptions& opts, std::vector<float>& table, const float* x,
                     std::int64_t first, std::int64_t n);

/// max |x[i]| over `x[0 .. n)`, a quiet NaN if any element is NaN (0 for n = 0): the amax scan,
/// on the widest instruction set of the codecs (core/codec.cpp).
float abs_max(const float* x, std::int64_t n);

/// `into[k] = max(into[k], other[k])`, NaN-propagating, growing `into` to `other`'s size: the
/// reduction of the amax max-AllReduce.
void combine_amax(std::vector<float>& into, const std::vector<float>& other);

/// The plan for the agreed table (`scale_for(format, amax[k], headroom, pow2_scale)` per entry).
/// Throws `InvalidArgument` when an amax is NaN or infinite (non-finite data with scaling on).
WirePlan make_plan(const CompressionOptions& opts, const std::vector<float>& agreed_amax,
                   float headroom);

/// How much partial results may grow over one contribution: `P` for `sum` and `avg` (a sum of P
/// terms each within the amax), 1 for `min` and `max`.
float reduction_headroom(ReduceOp op, int world_size);

/// Encodes `x[0 .. n)` (element indices `first ..`) into `out` (`n * plan.elem()` bytes).
void wire_encode(const WirePlan& plan, const float* x, std::int64_t first, std::int64_t n,
                 void* out);
/// Decodes `n` wire elements (element indices `first ..`) into `out`.
void wire_decode(const WirePlan& plan, const void* in, std::int64_t first, std::int64_t n,
                 float* out);
/// `x = decode(encode(x))` in place, through `tmp`.
void wire_round_trip(const WirePlan& plan, float* x, std::int64_t first, std::int64_t n,
                     std::vector<std::byte>& tmp);

/// One operand of `wire_reduce`.
struct WireSource {
  enum class Kind : std::uint8_t {
    wire,        ///< encoded elements, decoded: a contribution that crossed the wire
    round_trip,  ///< f32 values taken through `decode(encode(.))`: an owner's own contribution
    plain        ///< f32 values as they are: the ring's own value, added unencoded
  };
  Kind kind = Kind::wire;
  const void* data = nullptr;  ///< the run's first element (wire bytes or floats)
};

/// The fused reduction step of a compressed collective, over elements `first .. first + n`:
/// `acc = v_0 ⊕ v_1 ⊕ … ⊕ v_{k−1}`, folded left to right in f32 with `op` (reduce_into's
/// operand order), `v_i` the value of `sources[i]`; then `acc / (float)divide_by` when
/// `divide_by > 0` (finish_average); then, with `fin`, `acc` is encoded into `fin` (n wire
/// elements) and `out`, unless null, receives its decode, `rt(acc)`; without, `out` receives
/// `acc`. One pass
/// over cache-sized blocks, so no decoded operand or partial result goes through memory; the bits
/// are those of the unfused wire_decode / wire_round_trip / reduce_into / finish_average /
/// wire_encode / wire_decode sequence. `out` may be a plain source (same elements), nothing else
/// may overlap.
void wire_reduce(const WirePlan& plan, ReduceOp op, const std::vector<WireSource>& sources,
                 std::int64_t first, std::int64_t n, int divide_by, void* fin, float* out);

/// The values a rank contributes to a compressed reduction: its f32 input, divided by P (f32
/// division) when `avg` with `predivide`.
std::vector<float> contribution(const void* send, std::int64_t count, ReduceOp op,
                                const CompressionOptions& opts, int world_size);

/// The contribution as a backend reads it: `send` itself when that holds the same values, so that
/// a large call neither allocates nor copies its input; else `contribution(...)` in `storage` —
/// when `avg` predivides, or when the call is in place (its output overwrites the input while the
/// schedule may still read it).
const float* contribution_view(const void* send, bool in_place, std::int64_t count, ReduceOp op,
                               const CompressionOptions& opts, int world_size,
                               std::vector<float>& storage);

/// Whether the reduced result still needs the `avg` division (not predivided).
inline bool divides_after(ReduceOp op, const CompressionOptions& opts) {
  return op == ReduceOp::avg && !opts.predivide;
}

}  // namespace fusedcoll::detail
