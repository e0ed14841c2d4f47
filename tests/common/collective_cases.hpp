#pragma once
// Collective test cases shared by the backends' suites (emu, emu compressed, mpi): every case
// gives each rank one block of memory holding its send and receive regions with poisoned gaps;
// the backend runs on one copy of every block and ref/ on an identical copy, and the blocks are
// compared whole, so outputs must match exactly, inputs must be left alone (except in place),
// and nothing outside the receive regions may be written.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/communicator.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace fctest::collectives {

using fusedcoll::AllGatherArgs;
using fusedcoll::AllReduceAlgo;
using fusedcoll::AllReduceArgs;
using fusedcoll::AllToAllvArgs;
using fusedcoll::BroadcastArgs;
using fusedcoll::Communicator;
using fusedcoll::CompressionOptions;
using fusedcoll::DType;
using fusedcoll::ReduceOp;
using fusedcoll::ReduceScatterArgs;
using fusedcoll::ValueMode;

using Bytes = std::vector<unsigned char>;

// --- Entry points by argument type (every backend takes a Communicator) -----------------------------------------------

inline void call(Communicator& c, const AllReduceArgs& a) { fusedcoll::all_reduce(c, a); }
inline void call(Communicator& c, const AllToAllvArgs& a) { fusedcoll::all_to_allv(c, a); }
inline void call(Communicator& c, const ReduceScatterArgs& a) { fusedcoll::reduce_scatter(c, a); }
inline void call(Communicator& c, const AllGatherArgs& a) { fusedcoll::all_gather(c, a); }
inline void call(Communicator& c, const BroadcastArgs& a) { fusedcoll::broadcast(c, a); }
inline void ref_call(std::span<const AllReduceArgs> a) { fusedcoll::ref::all_reduce(a); }
inline void ref_call(std::span<const AllToAllvArgs> a) { fusedcoll::ref::all_to_allv(a); }
inline void ref_call(std::span<const ReduceScatterArgs> a) { fusedcoll::ref::reduce_scatter(a); }
inline void ref_call(std::span<const AllGatherArgs> a) { fusedcoll::ref::all_gather(a); }
inline void ref_call(std::span<const BroadcastArgs> a) { fusedcoll::ref::broadcast(a); }

// --- Cases --------------------------------------------------------------------------------------

/// One collective call of every rank. `got[r]` and `ref[r]` are rank r's memory block for the
/// backend under test and for ref/, identical before the run. (A multi-process backend builds
/// every rank's blocks too, runs its own rank's call on `got[rank]` and compares that block.)
struct Case {
  std::string what;
  std::vector<Bytes> got, ref;
  std::function<void(Communicator&)> on_backend;
  /// The backend's call on any copy of this rank's block (e.g. one in special memory).
  std::function<void(Communicator&, unsigned char*)> on_block;
  std::function<void()> on_ref;
};

using Cases = std::vector<std::unique_ptr<Case>>;

/// Layout helper: regions of a rank's block, each 64-byte aligned with a poisoned gap after it.
struct Layout {
  std::size_t size = 0;
  std::size_t add(std::size_t bytes) {
    const std::size_t at = size;
    size += (bytes + 63) / 64 * 64 + 64;
    return at;
  }
};

/// Creates a case whose blocks have the given sizes (poisoned), lets `fill` write the inputs into
/// each rank's block, copies the blocks for ref, and binds `make(rank, block)` -> Args.
template <class Args>
Case& add_case(Cases& cases, std::string what, const std::vector<std::size_t>& sizes,
               const std::function<void(int, unsigned char*)>& fill,
               std::function<Args(int, unsigned char*)> make) {
  auto c = std::make_unique<Case>();
  Case* cp = c.get();
  cp->what = std::move(what);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    cp->got.emplace_back(sizes[r]);
    fusedcoll::poison(cp->got[r].data(), sizes[r]);
    fill(static_cast<int>(r), cp->got[r].data());
  }
  cp->ref = cp->got;
  cp->on_block = [make](Communicator& comm, unsigned char* block) {
    call(comm, make(comm.rank(), block));
  };
  cp->on_backend = [cp](Communicator& comm) { cp->on_block(comm, cp->got[comm.rank()].data()); };
  cp->on_ref = [cp, make] {
    std::vector<Args> all;
    for (std::size_t r = 0; r < cp->ref.size(); ++r)
      all.push_back(make(static_cast<int>(r), cp->ref[r].data()));
    ref_call(std::span<const Args>(all));
  };
  cases.push_back(std::move(c));
  return *cp;
}

/// Empty when rank `r`'s block of `c` equals ref/'s; else where they first differ.
inline std::string first_difference(const Case& c, std::size_t r, const char* backend) {
  const Bytes& e = c.got[r];
  const Bytes& f = c.ref[r];
  if (std::memcmp(e.data(), f.data(), e.size()) == 0) return "";
  std::size_t i = 0;
  while (e[i] == f[i]) ++i;
  std::ostringstream os;
  os << c.what << ": rank " << r << " differs from ref first at byte " << i << " of " << e.size()
     << " (" << backend << " 0x" << std::hex << int(e[i]) << ", ref 0x" << int(f[i]) << ")";
  return os.str();
}

inline std::size_t esize(DType t) { return fusedcoll::dtype_size(t); }

// --- On the emulator ---------------------------------------------------------------------------

/// Runs all cases in order in one `World::run` (every rank makes every call), then ref/, and
/// compares every rank's block.
inline void run_cases(fusedcoll::emu::World& world, Cases& cases) {
  world.run([&](Communicator& comm) {
    for (auto& c : cases) c->on_backend(comm);
  });
  for (auto& c : cases) {
    c->on_ref();
    for (std::size_t r = 0; r < c->got.size(); ++r) {
      const std::string diff = first_difference(*c, r, "emu");
      if (diff.empty()) continue;
      ADD_FAILURE() << diff;
      break;
    }
  }
}

/// "P=4 C=2 resident=1 fuzz=7" for a test name.
inline std::string name_of(const fusedcoll::emu::WorldOptions& o) {
  std::ostringstream os;
  os << "P=" << o.world_size << " C=" << o.device.compute_units;
  if (o.device.max_resident_wgs) os << " resident=" << o.device.max_resident_wgs;
  if (o.fuzz_seed) os << " fuzz=" << o.fuzz_seed;
  return os.str();
}

// --- Case builders ------------------------------------------------------------------------------
// Each takes the wire options last (default: uncompressed); compressed wires need f32.

/// " wire=fp8_e4m3/per_block100/pow2" for a case name; empty for an uncompressed wire.
inline std::string wire_str(const CompressionOptions& w) {
  if (w.format == fusedcoll::WireFormat::none) return "";
  std::ostringstream os;
  os << " wire=" << to_string(w.format) << "/" << to_string(w.scaling);
  if (w.scaling == fusedcoll::Scaling::per_block) os << w.block;
  if (w.pow2_scale) os << "/pow2";
  if (w.predivide) os << "/predivide";
  if (w.overflow == fusedcoll::Overflow::ieee) os << "/ieee";
  return os.str();
}

/// AllReduce of `count` random values (f32 of mixed magnitudes; full-range integers, so sums wrap).
inline void add_all_reduce(Cases& cases, int P, std::int64_t count, DType dt, ReduceOp op,
                           AllReduceAlgo algo, bool in_place, std::uint64_t seed,
                           CompressionOptions w = {}) {
  const std::size_t bytes = count * esize(dt);
  Layout L;
  const std::size_t send_at = L.add(bytes), recv_at = in_place ? send_at : L.add(bytes);
  std::ostringstream what;
  what << "all_reduce P=" << P << " count=" << count << " " << dt << " " << to_string(op) << " "
       << to_string(algo) << wire_str(w) << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<AllReduceArgs>(
      cases, what.str(), std::vector<std::size_t>(P, L.size),
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, count, dt, seed, 1, r, ValueMode::random);
      },
      [=](int, unsigned char* m) {
        return AllReduceArgs{m + send_at, m + recv_at, count, dt, op, algo, w};
      });
}

/// An f32 AllReduce whose inputs hold NaN payloads (quiet and signalling), signed zeros and
/// infinities, differently per rank: the fold order becomes visible in the bits.
inline void add_special_values_all_reduce(Cases& cases, int P, std::int64_t count, ReduceOp op,
                                          AllReduceAlgo algo, std::uint64_t seed) {
  add_all_reduce(cases, P, count, DType::f32, op, algo, false, seed);
  Case& c = *cases.back();
  for (int r = 0; r < P; ++r) {
    // The send region is the block's first.
    auto* f = reinterpret_cast<float*>(c.got[r].data());
    for (std::int64_t i = 0; i < count; ++i) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 12, r, i);
      switch (h % 6) {
        case 0:
          f[i] = std::bit_cast<float>(0x7FC00000u | std::uint32_t(r * 64 + i));
          break;
        case 1:
          f[i] = std::bit_cast<float>(0xFF800001u + std::uint32_t(r));  // signalling
          break;
        case 2:
          f[i] = (h >> 8) % 2 ? 0.0f : -0.0f;
          break;
        case 3:
          f[i] = (h >> 8) % 2 ? INFINITY : -INFINITY;
          break;
        default:
          break;
      }
    }
    c.ref[r] = c.got[r];
  }
}

/// All-to-All(v) with uneven counts (zeros included) and displacements in shuffled order, with
/// gaps. `scale` multiplies the counts.
inline void add_all_to_allv(Cases& cases, int P, DType dt, std::int64_t scale, std::uint64_t seed,
                            CompressionOptions w = {}) {
  const std::size_t e = esize(dt);
  // c[r][q]: elements r sends to q.
  std::vector<std::vector<std::int64_t>> c(P, std::vector<std::int64_t>(P));
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 7, r, q);
      c[r][q] = (h % 4 == 0) ? 0 : static_cast<std::int64_t>(h >> 8) % 37 * scale + (h >> 20) % 3;
    }
  std::vector<std::vector<std::int64_t>> sdispl(P), rdispl(P);
  std::vector<std::size_t> sizes(P), send_at(P), recv_at(P);
  for (int r = 0; r < P; ++r) {
    // Send segments in reverse peer order with 3-element gaps; receive segments rotated by r
    // with 1-element gaps.
    std::int64_t at = 0;
    sdispl[r].assign(P, 0);
    for (int q = P - 1; q >= 0; --q) {
      sdispl[r][q] = at;
      at += c[r][q] + 3;
    }
    const std::int64_t send_elems = at;
    at = 0;
    rdispl[r].assign(P, 0);
    for (int i = 0; i < P; ++i) {
      const int p = (r + i) % P;
      rdispl[r][p] = at;
      at += c[p][r] + 1;
    }
    Layout L;
    send_at[r] = L.add(send_elems * e);
    recv_at[r] = L.add(at * e);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "all_to_allv P=" << P << " " << dt << " scale=" << scale << wire_str(w)
       << " seed=" << seed;
  add_case<AllToAllvArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        for (int q = 0; q < P; ++q)
          fusedcoll::fill_values(m + send_at[r] + sdispl[r][q] * e, c[r][q], dt, seed, 2 + q, r,
                                 ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        AllToAllvArgs a;
        a.send = m + send_at[r];
        a.recv = m + recv_at[r];
        a.dtype = dt;
        for (int q = 0; q < P; ++q) {
          a.send_counts.push_back(c[r][q]);
          a.recv_counts.push_back(c[q][r]);
        }
        a.send_displs = sdispl[r];
        a.recv_displs = rdispl[r];
        a.wire = w;
        return a;
      });
}

/// Uneven counts with zeros: pattern `kind` (0: all zero, 1: only the last rank, 2: mixed).
inline std::vector<std::int64_t> uneven(int P, int kind, std::int64_t scale, std::uint64_t seed) {
  std::vector<std::int64_t> n(P, 0);
  if (kind == 1) n[P - 1] = scale;
  if (kind == 2)
    for (int q = 0; q < P; ++q) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 11, q, 0);
      n[q] = (h % 3 == 0) ? 0 : 1 + static_cast<std::int64_t>(h >> 8) % scale;
    }
  return n;
}

inline std::int64_t offset_of(const std::vector<std::int64_t>& n, int rank) {
  std::int64_t at = 0;
  for (int q = 0; q < rank; ++q) at += n[q];
  return at;
}

inline std::string counts_str(const std::vector<std::int64_t>& n) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < n.size(); ++i) os << (i ? "," : "") << n[i];
  os << "]";
  return os.str();
}

inline void add_reduce_scatter(Cases& cases, const std::vector<std::int64_t>& n, DType dt,
                               ReduceOp op, bool in_place, std::uint64_t seed,
                               CompressionOptions w = {}) {
  const int P = static_cast<int>(n.size());
  const std::size_t e = esize(dt);
  const std::int64_t total = offset_of(n, P);
  std::vector<std::size_t> sizes(P), recv_at(P);
  Layout base;
  const std::size_t send_at = base.add(total * e);
  for (int r = 0; r < P; ++r) {
    Layout L = base;
    recv_at[r] = in_place ? send_at + offset_of(n, r) * e : L.add(n[r] * e);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "reduce_scatter counts=" << counts_str(n) << " " << dt << " " << to_string(op)
       << wire_str(w) << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<ReduceScatterArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, total, dt, seed, 3, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return ReduceScatterArgs{m + send_at, m + recv_at[r], n, dt, op, w};
      });
}

inline void add_all_gather(Cases& cases, const std::vector<std::int64_t>& n, DType dt,
                           bool in_place, std::uint64_t seed, CompressionOptions w = {}) {
  const int P = static_cast<int>(n.size());
  const std::size_t e = esize(dt);
  const std::int64_t total = offset_of(n, P);
  std::vector<std::size_t> sizes(P), send_at(P);
  Layout base;
  const std::size_t recv_at = base.add(total * e);
  for (int r = 0; r < P; ++r) {
    Layout L = base;
    send_at[r] = in_place ? recv_at + offset_of(n, r) * e : L.add(n[r] * e);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "all_gather counts=" << counts_str(n) << " " << dt << wire_str(w)
       << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<AllGatherArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at[r], n[r], dt, seed, 4, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return AllGatherArgs{m + send_at[r], m + recv_at, n, dt, w};
      });
}

inline void add_broadcast(Cases& cases, int P, std::int64_t count, DType dt, int root, bool in_place,
                   std::uint64_t seed) {
  const std::size_t bytes = count * esize(dt);
  Layout L;
  const std::size_t send_at = L.add(bytes), recv_at = in_place ? send_at : L.add(bytes);
  std::ostringstream what;
  what << "broadcast P=" << P << " count=" << count << " " << dt << " root=" << root
       << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<BroadcastArgs>(
      cases, what.str(), std::vector<std::size_t>(P, L.size),
      [=](int r, unsigned char* m) {
        // Every rank's send region holds data; only the root's may be read.
        fusedcoll::fill_values(m + send_at, count, dt, seed, 5, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return BroadcastArgs{r == root ? m + send_at : nullptr, m + recv_at, count, dt, root};
      });
}

// --- The grids every backend's suite runs -----------------------------------------------------

inline constexpr std::int64_t kCounts[] = {0, 1, 7, 1000};  // 1000 is not divisible by 3 or 8
inline constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
inline constexpr DType kReducible[] = {DType::f32, DType::i32, DType::i64};
inline constexpr AllReduceAlgo kAlgos[] = {AllReduceAlgo::direct, AllReduceAlgo::ring};

/// Every count, reducible type, op and algorithm, out of and in place; then `large` elements
/// (sum, and avg in place), which must span several of the backend's tiles or fold pieces.
inline void add_all_reduce_grid(Cases& cases, int P, std::int64_t large) {
  std::uint64_t seed = 100;
  for (std::int64_t count : kCounts)
    for (DType dt : kReducible)
      for (ReduceOp op : kOps)
        for (AllReduceAlgo algo : kAlgos)
          for (bool in_place : {false, true})
            add_all_reduce(cases, P, count, dt, op, algo, in_place, ++seed);
  for (AllReduceAlgo algo : kAlgos)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      add_all_reduce(cases, P, large, DType::f32, op, algo, op == ReduceOp::avg, ++seed);
}

/// Uneven All-to-All(v) in several types, blocks of several tiles, and the equal-count form.
inline void add_all_to_allv_grid(Cases& cases, int P) {
  std::uint64_t seed = 200;
  for (DType dt : {DType::f16, DType::f32, DType::i64, DType::f8_e4m3, DType::bf16})
    add_all_to_allv(cases, P, dt, 1, ++seed);
  add_all_to_allv(cases, P, DType::f16, 2000, ++seed);
  for (std::int64_t n : {0, 1, 5}) {
    const std::size_t e = esize(DType::f16);
    Layout L;
    const std::size_t send_at = L.add(n * P * e), recv_at = L.add(n * P * e);
    const std::uint64_t s = ++seed;
    add_case<AllToAllvArgs>(
        cases, fusedcoll::detail::make_string("alltoall count=", n),
        std::vector<std::size_t>(P, L.size),
        [=](int r, unsigned char* m) {
          fusedcoll::fill_values(m + send_at, n * P, DType::f16, s, 6, r, ValueMode::random);
        },
        [=](int, unsigned char* m) {
          return fusedcoll::make_alltoall(m + send_at, m + recv_at, n, DType::f16, P);
        });
  }
}

inline void add_reduce_scatter_grid(Cases& cases, int P) {
  std::uint64_t seed = 300;
  for (int kind : {0, 1, 2})
    for (DType dt : kReducible)
      for (ReduceOp op : kOps)
        for (bool in_place : {false, true}) {
          ++seed;
          add_reduce_scatter(cases, uneven(P, kind, 250, seed), dt, op, in_place, seed);
        }
  ++seed;
  add_reduce_scatter(cases, uneven(P, 2, 50000, seed), DType::f32, ReduceOp::sum, true, seed);
}

inline void add_all_gather_grid(Cases& cases, int P) {
  std::uint64_t seed = 400;
  for (int kind : {0, 1, 2})
    for (DType dt : {DType::f32, DType::f16, DType::i64, DType::f8_e5m2})
      for (bool in_place : {false, true}) {
        ++seed;
        add_all_gather(cases, uneven(P, kind, 250, seed), dt, in_place, seed);
      }
  ++seed;
  add_all_gather(cases, uneven(P, 2, 50000, seed), DType::f16, true, seed);
}

inline void add_broadcast_grid(Cases& cases, int P) {
  std::uint64_t seed = 500;
  for (int root = 0; root < P; ++root)
    for (std::int64_t count : kCounts)
      for (DType dt : {DType::f32, DType::bf16, DType::i64})
        for (bool in_place : {false, true})
          add_broadcast(cases, P, count, dt, root, in_place, ++seed);
  add_broadcast(cases, P, 70001, DType::f16, P - 1, false, ++seed);  // several tiles
}

}  // namespace fctest::collectives
