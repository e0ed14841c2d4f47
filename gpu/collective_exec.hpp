#pragma once
// What one block does with one step of a collective plan (gpu/collective_plan.hpp), as
// `__host__ __device__` code: the kernel of gpu/collectives.cpp runs it with the block's threads,
// and the normal test suite runs it on the CPU with one "thread" under a simulated scheduler
// (tests/gpu_plan_test.cpp), so the folds, conversions and index arithmetic the GPU executes are
// the ones checked against ref/ on every machine.
//
// Arithmetic is ref/'s (core/kernels.cpp, reduce_into and finish_average): f32 sums keep the
// first NaN operand, quietened; min/max are selects whose ties keep the accumulator; integers
// wrap; avg divides by (float)P (IEEE) or truncates. An f32 sum of two non-NaN values that is NaN
// (inf + -inf) is pinned to x86's default NaN 0xFFC00000, so the GPU gives ref/'s bits on the x86
// hosts the tests run on (docs/semantics.md leaves that one NaN to the ISA).

#include <cstdint>
#include <type_traits>

#include "gpu/wire_codec.hpp"

namespace fusedcoll::gpu::coll {

/// A resolved source / target / step: plan entries with addresses (device addresses in the
/// kernel, host ones in the simulation) and absolute slot ids.
struct XSource {
  const unsigned char* p;
  std::uint8_t access;  // coll::Access
  bool predivide;
  std::int64_t index0;
};
struct XTarget {
  unsigned char* p;
  std::uint8_t access;
  std::int64_t index0;
  int signal_rank;  // -1: no signal
  int signal_slot;
};
/// Process mode: how a target on a proxied peer travels (docs/gpu.md, "Process mode"). The step
/// writes it into this process's shadow of the peer's heap (the target's address), then the
/// block posts a put of `n * width` bytes from there to the peer's heap at `offset`, before the
/// target's signal. `peer` -1: nothing to put (the rank itself, an IPC peer, or the single mode).
struct XPut {
  std::uint64_t offset;
  std::int32_t peer;
  std::int32_t width;  // bytes per element of the target (the dtype's, or the wire's)
};
struct XStep {
  int wait_slot;  // -1: no wait
  std::uint64_t wait_target;
  std::int64_t n;
  int src_begin, src_count, dst_begin, dst_count;
  bool divide;
  bool move;  // coll::is_move: copy bytes, whatever the dtype
};

/// Everything a step needs besides itself.
struct Exec {
  int P;
  int dtype;  // fusedcoll::DType
  int op;     // fusedcoll::ReduceOp
  int elem;   // bytes per element of dtype
  codec::Wire wire;
  const XStep* steps;
  const int* step_begin;  // [P + 1]: rank r's steps are [step_begin[r], step_begin[r + 1])
  const XSource* sources;
  const XTarget* targets;
  const XPut* puts;  // [target] in process mode; null in the single mode (nothing is put)
};

namespace exec {

enum : int { kF32 = 0, kI32 = 5, kI64 = 6 };                  // DType values
enum : int { kSum = 0, kAvg = 1, kMin = 2, kMax = 3 };        // ReduceOp values
enum : std::uint8_t { kRaw = 0, kWire = 1, kRoundTrip = 2 };  // Access values

FC_HD inline float quiet(float v) { return codec::float_of(codec::bits_of(v) | 0x400000u); }

template <class T>
FC_HD T combine(int op, T acc, T v) {
  if constexpr (std::is_same_v<T, float>) {
    if (op == kSum || op == kAvg) {
      if (acc != acc) return quiet(acc);
      if (v != v) return quiet(v);
      const float s = codec::add_rn(acc, v);
      return s != s ? codec::float_of(0xFFC00000u) : s;
    }
    if (op == kMin) return (acc == acc && (v < acc || v != v)) ? v : acc;
    return (acc == acc && (v > acc || v != v)) ? v : acc;
  } else {
    using U = std::make_unsigned_t<T>;
    if (op == kSum || op == kAvg) return static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
    if (op == kMin) return v < acc ? v : acc;
    return v > acc ? v : acc;
  }
}

template <class T>
FC_HD T average(T acc, int P) {
  if constexpr (std::is_same_v<T, float>)
    return codec::div_rn(acc, static_cast<float>(P));
  else
    return acc / static_cast<T>(P);
}

template <class T>
FC_HD T load(const Exec& x, const XSource& s, std::int64_t e) {
  if constexpr (std::is_same_v<T, float>) {
    if (s.access == kWire) return x.wire.decode_at(x.wire.load(s.p, e), s.index0 + e);
    float v = reinterpret_cast<const float*>(s.p)[e];
    if (s.predivide) v = codec::div_rn(v, static_cast<float>(x.P));
    if (s.access == kRoundTrip) v = x.wire.round_trip(v, s.index0 + e);
    return v;
  } else {
    return reinterpret_cast<const T*>(s.p)[e];
  }
}

template <class T>
FC_HD void store(const Exec& x, const XTarget& t, std::int64_t e, T v) {
  if constexpr (std::is_same_v<T, float>) {
    if (t.access == kWire) {
      x.wire.store(t.p, e, x.wire.encode_at(v, t.index0 + e));
      return;
    }
    if (t.access == kRoundTrip) v = x.wire.round_trip(v, t.index0 + e);
  }
  reinterpret_cast<T*>(t.p)[e] = v;
}

/// Element `e` of a step: its sources folded left to right (rank order), divided for avg, stored
/// into every target.
template <class T>
FC_HD void fold_element(const Exec& x, const XStep& s, const XSource* src, const XTarget* dst,
                        std::int64_t e) {
  T acc = load<T>(x, src[0], e);
  for (int k = 1; k < s.src_count; ++k) acc = combine<T>(x.op, acc, load<T>(x, src[k], e));
  if (s.divide) acc = average<T>(acc, x.P);
  for (int k = 0; k < s.dst_count; ++k) store<T>(x, dst[k], e, acc);
}

/// 16 bytes of T: the unit of the vector fold.
template <class T>
struct alignas(16) Vec {
  T v[16 / sizeof(T)];
};

template <class T>
FC_HD void combine_vec(int op, Vec<T>& acc, const Vec<T>& v) {
  for (int j = 0; j < static_cast<int>(16 / sizeof(T)); ++j) acc.v[j] = combine<T>(op, acc.v[j], v.v[j]);
}

/// Whether a step can fold in 16-byte vectors: raw values only (no wire, no predivide) at
/// 16-byte-aligned addresses.
template <class T>
FC_HD bool vector_foldable(const XStep& s, const XSource* src, const XTarget* dst) {
  std::uintptr_t bits = 0;
  for (int k = 0; k < s.src_count; ++k) {
    if (src[k].access != kRaw || src[k].predivide) return false;
    bits |= reinterpret_cast<std::uintptr_t>(src[k].p);
  }
  for (int k = 0; k < s.dst_count; ++k) {
    if (dst[k].access != kRaw) return false;
    bits |= reinterpret_cast<std::uintptr_t>(dst[k].p);
  }
  return bits % 16 == 0;
}

/// Thread `tid` of `nthreads`: every nthreads-th element of the step, each by one thread (a
/// fold is never split). Raw aligned steps go 16 bytes at a time, four sources' loads issued
/// before they are combined (more bytes in flight); each element is still folded in source
/// order, so the bits are the scalar loop's.
template <class T>
FC_HD void fold_step(const Exec& x, const XStep& s, int tid, int nthreads) {
  const XSource* src = x.sources + s.src_begin;
  const XTarget* dst = x.targets + s.dst_begin;
  std::int64_t e0 = 0;
  if (vector_foldable<T>(s, src, dst)) {
    using V = Vec<T>;
    constexpr std::int64_t W = 16 / sizeof(T);
    const std::int64_t units = s.n / W;
    const int ns = s.src_count;
    for (std::int64_t i = tid; i < units; i += nthreads) {
      V acc = reinterpret_cast<const V*>(src[0].p)[i];
      int k = 1;
      for (; k + 3 < ns; k += 4) {
        const V a = reinterpret_cast<const V*>(src[k].p)[i];
        const V b = reinterpret_cast<const V*>(src[k + 1].p)[i];
        const V c = reinterpret_cast<const V*>(src[k + 2].p)[i];
        const V d = reinterpret_cast<const V*>(src[k + 3].p)[i];
        combine_vec<T>(x.op, acc, a);
        combine_vec<T>(x.op, acc, b);
        combine_vec<T>(x.op, acc, c);
        combine_vec<T>(x.op, acc, d);
      }
      for (; k < ns; ++k) combine_vec<T>(x.op, acc, reinterpret_cast<const V*>(src[k].p)[i]);
      if (s.divide)
        for (int j = 0; j < static_cast<int>(W); ++j) acc.v[j] = average<T>(acc.v[j], x.P);
      for (int k2 = 0; k2 < s.dst_count; ++k2) reinterpret_cast<V*>(dst[k2].p)[i] = acc;
    }
    e0 = units * W;  // the tail, element by element
  }
  for (std::int64_t e = e0 + tid; e < s.n; e += nthreads) fold_element<T>(x, s, src, dst, e);
}

struct alignas(16) Unit16 {
  std::uint64_t lo, hi;
};

/// Four strided units per thread loaded before any is stored, so that a block has four loads in
/// flight per thread rather than one.
template <class U>
FC_HD void copy_units(const XSource& src, const XTarget* dst, int ndst, std::int64_t units, int tid,
                      int nthreads) {
  const U* in = reinterpret_cast<const U*>(src.p);
  const std::int64_t step = nthreads;
  std::int64_t i = tid;
  for (; i + 3 * step < units; i += 4 * step) {
    const U v0 = in[i], v1 = in[i + step], v2 = in[i + 2 * step], v3 = in[i + 3 * step];
    for (int k = 0; k < ndst; ++k) {
      U* out = reinterpret_cast<U*>(dst[k].p);
      out[i] = v0;
      out[i + step] = v1;
      out[i + 2 * step] = v2;
      out[i + 3 * step] = v3;
    }
  }
  for (; i < units; i += step) {
    const U v = in[i];
    for (int k = 0; k < ndst; ++k) reinterpret_cast<U*>(dst[k].p)[i] = v;
  }
}

/// A move: the bytes of the source into every target, in the widest unit (16, 8, 4, 2 or 1
/// bytes) that every address and the length are aligned to.
FC_HD inline void move_step(const Exec& x, const XStep& s, int tid, int nthreads) {
  const XSource& src = x.sources[s.src_begin];
  const XTarget* dst = x.targets + s.dst_begin;
  const std::int64_t bytes = s.n * x.elem;
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(src.p) | static_cast<std::uint64_t>(bytes);
  for (int k = 0; k < s.dst_count; ++k) bits |= reinterpret_cast<std::uintptr_t>(dst[k].p);
  if (bits % 16 == 0)
    copy_units<Unit16>(src, dst, s.dst_count, bytes / 16, tid, nthreads);
  else if (bits % 8 == 0)
    copy_units<std::uint64_t>(src, dst, s.dst_count, bytes / 8, tid, nthreads);
  else if (bits % 4 == 0)
    copy_units<std::uint32_t>(src, dst, s.dst_count, bytes / 4, tid, nthreads);
  else if (bits % 2 == 0)
    copy_units<std::uint16_t>(src, dst, s.dst_count, bytes / 2, tid, nthreads);
  else
    copy_units<std::uint8_t>(src, dst, s.dst_count, bytes, tid, nthreads);
}

}  // namespace exec

/// Runs step `s` with thread `tid` of `nthreads` (the caller waits before and signals after).
FC_HD inline void run_step(const Exec& x, const XStep& s, int tid, int nthreads) {
  if (s.n == 0 || s.src_count == 0) return;
  if (s.move) return exec::move_step(x, s, tid, nthreads);
  if (x.dtype == exec::kI32) return exec::fold_step<std::int32_t>(x, s, tid, nthreads);
  if (x.dtype == exec::kI64) return exec::fold_step<std::int64_t>(x, s, tid, nthreads);
  exec::fold_step<float>(x, s, tid, nthreads);
}

/// One work item of a rank, the whole of a block's part in the protocol: the step's wait, the
/// step, then for each target the put that carries it to a proxied peer (process mode) and the
/// target's signal, in that order (put before signal). `Io` is the block's transport: the kernel's
/// (block_wait, block_put, block_signal over its threads) or the CPU suite's (host threads, shared
/// memory and the proxy's queue: tests/mpi/gpu_process_replay_test.cpp), so the order that the
/// protocol depends on is this one code. Returns false when the wait gave up (the kernel then
/// leaves).
template <class Io>
FC_HD bool run_item(const Exec& x, const XStep& s, Io& io) {
  if (s.wait_slot >= 0 && !io.wait(s.wait_slot, s.wait_target)) return false;
  io.run(x, s);
  for (int d = s.dst_begin; d < s.dst_begin + s.dst_count; ++d) {
    const XTarget& t = x.targets[d];
    if (x.puts != nullptr && x.puts[d].peer >= 0)
      io.put(x.puts[d].peer, x.puts[d].offset, t.p,
             static_cast<std::uint64_t>(s.n) * static_cast<std::uint64_t>(x.puts[d].width));
    if (t.signal_slot >= 0) io.signal(t.signal_rank, t.signal_slot);
  }
  return true;
}

}  // namespace fusedcoll::gpu::coll
