// The emulator's standalone collectives against ref/, bit for bit. Every case gives each rank one
// block of memory holding its send and receive regions (with poisoned gaps around them); the
// emulator runs on one copy of every block and ref/ on an identical copy, then the whole blocks
// are compared with memcmp. So the outputs must match exactly, inputs must be left alone (except
// in place), and nothing outside the receive regions may be written.
//
// Many cases run back to back inside one World::run, which also checks that scratch buffers and
// signal slots are reused correctly across calls (and across different collectives).

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
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

namespace {

using fusedcoll::AllGatherArgs;
using fusedcoll::AllReduceAlgo;
using fusedcoll::AllReduceArgs;
using fusedcoll::AllToAllvArgs;
using fusedcoll::BroadcastArgs;
using fusedcoll::Communicator;
using fusedcoll::DType;
using fusedcoll::ReduceOp;
using fusedcoll::ReduceScatterArgs;
using fusedcoll::ValueMode;
using fusedcoll::emu::World;
using fusedcoll::emu::WorldOptions;

using Bytes = std::vector<unsigned char>;

const std::int64_t kCounts[] = {0, 1, 7, 1000};  // 1000 is not divisible by 3 or 8
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
const DType kReducible[] = {DType::f32, DType::i32, DType::i64};
const AllReduceAlgo kAlgos[] = {AllReduceAlgo::direct, AllReduceAlgo::ring};

// --- ref and emu entry points by argument type -----------------------------------------------

void emu_call(Communicator& c, const AllReduceArgs& a) { fusedcoll::all_reduce(c, a); }
void emu_call(Communicator& c, const AllToAllvArgs& a) { fusedcoll::all_to_allv(c, a); }
void emu_call(Communicator& c, const ReduceScatterArgs& a) { fusedcoll::reduce_scatter(c, a); }
void emu_call(Communicator& c, const AllGatherArgs& a) { fusedcoll::all_gather(c, a); }
void emu_call(Communicator& c, const BroadcastArgs& a) { fusedcoll::broadcast(c, a); }
void ref_call(std::span<const AllReduceArgs> a) { fusedcoll::ref::all_reduce(a); }
void ref_call(std::span<const AllToAllvArgs> a) { fusedcoll::ref::all_to_allv(a); }
void ref_call(std::span<const ReduceScatterArgs> a) { fusedcoll::ref::reduce_scatter(a); }
void ref_call(std::span<const AllGatherArgs> a) { fusedcoll::ref::all_gather(a); }
void ref_call(std::span<const BroadcastArgs> a) { fusedcoll::ref::broadcast(a); }

// --- Cases --------------------------------------------------------------------------------------

/// One collective call of every rank. `emu[r]` and `ref[r]` are rank r's memory block for each
/// backend, identical before the run.
struct Case {
  std::string what;
  std::vector<Bytes> emu, ref;
  std::function<void(Communicator&)> on_emu;
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
/// each rank's emu block, copies the blocks for ref, and binds `make(rank, block)` -> Args.
template <class Args>
Case& add_case(Cases& cases, std::string what, const std::vector<std::size_t>& sizes,
               const std::function<void(int, unsigned char*)>& fill,
               std::function<Args(int, unsigned char*)> make) {
  auto c = std::make_unique<Case>();
  Case* cp = c.get();
  cp->what = std::move(what);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    cp->emu.emplace_back(sizes[r]);
    fusedcoll::poison(cp->emu[r].data(), sizes[r]);
    fill(static_cast<int>(r), cp->emu[r].data());
  }
  cp->ref = cp->emu;
  cp->on_emu = [cp, make](Communicator& comm) {
    emu_call(comm, make(comm.rank(), cp->emu[comm.rank()].data()));
  };
  cp->on_ref = [cp, make] {
    std::vector<Args> all;
    for (std::size_t r = 0; r < cp->ref.size(); ++r)
      all.push_back(make(static_cast<int>(r), cp->ref[r].data()));
    ref_call(std::span<const Args>(all));
  };
  cases.push_back(std::move(c));
  return *cp;
}

/// Runs all cases in order in one `World::run` (every rank makes every call), then ref/, and
/// compares every rank's block.
void run_cases(World& world, Cases& cases) {
  world.run([&](Communicator& comm) {
    for (auto& c : cases) c->on_emu(comm);
  });
  for (auto& c : cases) {
    c->on_ref();
    for (std::size_t r = 0; r < c->emu.size(); ++r) {
      const Bytes& e = c->emu[r];
      const Bytes& f = c->ref[r];
      if (std::memcmp(e.data(), f.data(), e.size()) == 0) continue;
      std::size_t i = 0;
      while (e[i] == f[i]) ++i;
      ADD_FAILURE() << c->what << ": rank " << r << " differs from ref first at byte " << i
                    << " of " << e.size() << " (emu 0x" << std::hex << int(e[i]) << ", ref 0x"
                    << int(f[i]) << std::dec << ")";
      break;
    }
  }
}

std::size_t esize(DType t) { return fusedcoll::dtype_size(t); }

std::string name_of(const WorldOptions& o) {
  std::ostringstream os;
  os << "P=" << o.world_size << " C=" << o.device.compute_units;
  if (o.device.max_resident_wgs) os << " resident=" << o.device.max_resident_wgs;
  if (o.fuzz_seed) os << " fuzz=" << o.fuzz_seed;
  return os.str();
}

// --- Case builders ------------------------------------------------------------------------------

/// AllReduce of `count` random values (f32 of mixed magnitudes; full-range integers, so sums wrap).
void add_all_reduce(Cases& cases, int P, std::int64_t count, DType dt, ReduceOp op,
                    AllReduceAlgo algo, bool in_place, std::uint64_t seed) {
  const std::size_t bytes = count * esize(dt);
  Layout L;
  const std::size_t send_at = L.add(bytes), recv_at = in_place ? send_at : L.add(bytes);
  std::ostringstream what;
  what << "all_reduce P=" << P << " count=" << count << " " << dt << " " << to_string(op) << " "
       << to_string(algo) << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<AllReduceArgs>(
      cases, what.str(), std::vector<std::size_t>(P, L.size),
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, count, dt, seed, 1, r, ValueMode::random);
      },
      [=](int, unsigned char* m) {
        return AllReduceArgs{m + send_at, m + recv_at, count, dt, op, algo};
      });
}

/// All-to-All(v) with uneven counts (zeros included) and displacements in shuffled order, with
/// gaps. `scale` multiplies the counts.
void add_all_to_allv(Cases& cases, int P, DType dt, std::int64_t scale, std::uint64_t seed) {
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
  what << "all_to_allv P=" << P << " " << dt << " scale=" << scale << " seed=" << seed;
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
        return a;
      });
}

/// Uneven counts with zeros: pattern `kind` (0: all zero, 1: only the last rank, 2: mixed).
std::vector<std::int64_t> uneven(int P, int kind, std::int64_t scale, std::uint64_t seed) {
  std::vector<std::int64_t> n(P, 0);
  if (kind == 1) n[P - 1] = scale;
  if (kind == 2)
    for (int q = 0; q < P; ++q) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 11, q, 0);
      n[q] = (h % 3 == 0) ? 0 : 1 + static_cast<std::int64_t>(h >> 8) % scale;
    }
  return n;
}

std::int64_t offset_of(const std::vector<std::int64_t>& n, int rank) {
  std::int64_t at = 0;
  for (int q = 0; q < rank; ++q) at += n[q];
  return at;
}

std::string counts_str(const std::vector<std::int64_t>& n) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < n.size(); ++i) os << (i ? "," : "") << n[i];
  os << "]";
  return os.str();
}

void add_reduce_scatter(Cases& cases, const std::vector<std::int64_t>& n, DType dt, ReduceOp op,
                        bool in_place, std::uint64_t seed) {
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
       << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<ReduceScatterArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, total, dt, seed, 3, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return ReduceScatterArgs{m + send_at, m + recv_at[r], n, dt, op};
      });
}

void add_all_gather(Cases& cases, const std::vector<std::int64_t>& n, DType dt, bool in_place,
                    std::uint64_t seed) {
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
  what << "all_gather counts=" << counts_str(n) << " " << dt << (in_place ? " in-place" : "")
       << " seed=" << seed;
  add_case<AllGatherArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at[r], n[r], dt, seed, 4, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return AllGatherArgs{m + send_at[r], m + recv_at, n, dt};
      });
}

void add_broadcast(Cases& cases, int P, std::int64_t count, DType dt, int root, bool in_place,
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

/// A mix of every collective, used under fuzzing and small residency limits.
void add_mix(Cases& cases, int P, std::uint64_t seed) {
  for (AllReduceAlgo algo : kAlgos) {
    add_all_reduce(cases, P, 1000, DType::f32, ReduceOp::sum, algo, false, seed);
    add_all_reduce(cases, P, 7, DType::f32, ReduceOp::min, algo, true, seed);
    add_all_reduce(cases, P, 2 * 16384 * P + 5, DType::f32, ReduceOp::avg, algo, true, seed);
  }
  add_all_to_allv(cases, P, DType::f16, 1, seed);
  add_all_to_allv(cases, P, DType::f32, 1000, seed);
  add_reduce_scatter(cases, uneven(P, 2, 300, seed), DType::f32, ReduceOp::sum, false, seed);
  add_reduce_scatter(cases, uneven(P, 2, 40000, seed), DType::f32, ReduceOp::max, true, seed);
  add_all_gather(cases, uneven(P, 2, 300, seed), DType::i64, true, seed);
  add_all_gather(cases, uneven(P, 2, 40000, seed), DType::f16, false, seed);
  for (int root = 0; root < P; ++root)
    add_broadcast(cases, P, root == 0 ? 70000 : 100, DType::f32, root, root % 2 == 1, seed);
}

// --- Tests --------------------------------------------------------------------------------------

struct WorldParam {
  int P;
  int C;
};

std::vector<WorldParam> worlds() {
  std::vector<WorldParam> out;
  for (int P : {1, 2, 3, 4, 8})
    for (int C : {1, 2, 4}) out.push_back({P, C});
  return out;
}

class EmuCollectives : public ::testing::TestWithParam<WorldParam> {
 protected:
  WorldOptions options() const {
    WorldOptions o;
    o.world_size = GetParam().P;
    o.device.compute_units = GetParam().C;
    return o;
  }
};

TEST_P(EmuCollectives, AllReduceMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  std::uint64_t seed = 100;
  for (std::int64_t count : kCounts)
    for (DType dt : kReducible)
      for (ReduceOp op : kOps)
        for (AllReduceAlgo algo : kAlgos)
          for (bool in_place : {false, true})
            add_all_reduce(cases, P, count, dt, op, algo, in_place, ++seed);
  // Several 64 KiB tiles per chunk.
  for (AllReduceAlgo algo : kAlgos)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      add_all_reduce(cases, P, 2 * 16384 * P + 3, DType::f32, op, algo, op == ReduceOp::avg,
                     ++seed);
  run_cases(world, cases);
}

TEST_P(EmuCollectives, AllToAllvMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  std::uint64_t seed = 200;
  for (DType dt : {DType::f16, DType::f32, DType::i64, DType::f8_e4m3, DType::bf16})
    add_all_to_allv(cases, P, dt, 1, ++seed);
  add_all_to_allv(cases, P, DType::f16, 2000, ++seed);  // blocks of several tiles
  // The equal-count form.
  std::vector<std::int64_t> counts = {0, 1, 5};
  for (std::int64_t n : counts) {
    const std::size_t e = esize(DType::f16);
    Layout L;
    const std::size_t send_at = L.add(n * P * e), recv_at = L.add(n * P * e);
    const std::uint64_t s = ++seed;
    add_case<AllToAllvArgs>(
        cases, "alltoall count=" + std::to_string(n), std::vector<std::size_t>(P, L.size),
        [=](int r, unsigned char* m) {
          fusedcoll::fill_values(m + send_at, n * P, DType::f16, s, 6, r, ValueMode::random);
        },
        [=](int, unsigned char* m) {
          return fusedcoll::make_alltoall(m + send_at, m + recv_at, n, DType::f16, P);
        });
  }
  run_cases(world, cases);
}

TEST_P(EmuCollectives, ReduceScatterMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
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
  run_cases(world, cases);
}

TEST_P(EmuCollectives, AllGatherMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  std::uint64_t seed = 400;
  for (int kind : {0, 1, 2})
    for (DType dt : {DType::f32, DType::f16, DType::i64, DType::f8_e5m2})
      for (bool in_place : {false, true}) {
        ++seed;
        add_all_gather(cases, uneven(P, kind, 250, seed), dt, in_place, seed);
      }
  ++seed;
  add_all_gather(cases, uneven(P, 2, 50000, seed), DType::f16, true, seed);
  run_cases(world, cases);
}

TEST_P(EmuCollectives, BroadcastMatchesRef) {
  const int P = GetParam().P;
  World world(options());
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  std::uint64_t seed = 500;
  for (int root = 0; root < P; ++root)
    for (std::int64_t count : kCounts)
      for (DType dt : {DType::f32, DType::bf16, DType::i64})
        for (bool in_place : {false, true})
          add_broadcast(cases, P, count, dt, root, in_place, ++seed);
  add_broadcast(cases, P, 70001, DType::f16, P - 1, false, ++seed);  // several tiles
  run_cases(world, cases);
}

INSTANTIATE_TEST_SUITE_P(Worlds, EmuCollectives, ::testing::ValuesIn(worlds()),
                         [](const ::testing::TestParamInfo<WorldParam>& i) {
                           // make_string: GCC 12 warns falsely (-Wrestrict) on "P" + to_string.
                           return fusedcoll::detail::make_string("P", i.param.P, "_C", i.param.C);
                         });

// Schedule fuzzing (random workgroup start order, random delays before puts and signals) must not
// change a bit. Every collective, 50 seeds (10 under the sanitizers, which are 5-15x slower; the
// Release run does all 50), P in {2, 3, 4, 8}.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kFuzzSeeds = 10;
#else
constexpr std::uint64_t kFuzzSeeds = 50;
#endif
TEST(EmuCollectivesFuzz, FiftySeedsBitExact) {
  constexpr int kWorlds[] = {2, 3, 4, 8};
  for (std::uint64_t fuzz = 1; fuzz <= kFuzzSeeds; ++fuzz) {
    WorldOptions o;
    o.world_size = kWorlds[fuzz % 4];
    o.device.compute_units = 2;
    o.fuzz_seed = fuzz * 7919;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_mix(cases, o.world_size, 600 + fuzz);
    run_cases(world, cases);
  }
}

// Persistent grids must not rely on more residency than there is: one or two resident WGs.
TEST(EmuCollectivesResidency, TinyDevicesStillComplete) {
  for (int resident : {1, 2}) {
    WorldOptions o;
    o.world_size = 4;
    o.device.compute_units = 1;
    o.device.max_resident_wgs = resident;
    o.fuzz_seed = 99 + resident;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_mix(cases, o.world_size, 700 + resident);
    run_cases(world, cases);
  }
}

// A chunk above 64 tiles of 64 KiB: tiles grow instead of outnumbering the slots.
TEST(EmuCollectivesLarge, ChunksBeyondTheTileLimit) {
  WorldOptions o;
  o.world_size = 2;
  o.device.compute_units = 2;
  World world(o);
  Cases cases;
  const std::int64_t count = 2 * 64 * 16384 + 4099;  // chunks of > 64 tiles of 16384 elements
  for (AllReduceAlgo algo : kAlgos)
    add_all_reduce(cases, 2, count, DType::i32, ReduceOp::sum, algo, algo == AllReduceAlgo::ring,
                   800);
  add_reduce_scatter(cases, {count / 2, count - count / 2}, DType::f32, ReduceOp::sum, false, 801);
  add_all_gather(cases, {count / 2, 3}, DType::i32, false, 802);
  add_broadcast(cases, 2, count, DType::i32, 1, false, 803);
  run_cases(world, cases);
}

// The worked example of docs/semantics.md: direct and ring differ, with literal expected bits.
TEST(EmuCollectivesSemantics, DirectAndRingOrdersDiffer) {
  WorldOptions o;
  o.world_size = 3;
  o.device.compute_units = 1;
  World world(o);
  const float v[3] = {1e8f, 1.0f, -1e8f};
  std::vector<std::vector<float>> direct(3, std::vector<float>(3)), ring = direct;
  world.run([&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> send(3, v[r]);
    fusedcoll::all_reduce(
        comm, {send.data(), direct[r].data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::direct});
    fusedcoll::all_reduce(
        comm, {send.data(), ring[r].data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::ring});
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][0]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][1]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[r][2]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][0]), 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][1]), 0x3F800000u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[r][2]), 0u);
  }
}

// NaN payloads, signed zeros and infinities: min/max keep the pinned operand, sums the first NaN,
// so the fold order shows in the bits; the emulator must reproduce each algorithm's.
TEST(EmuCollectivesSemantics, SpecialValuesFollowTheFoldOrder) {
  for (int P : {2, 3, 5}) {
    WorldOptions o;
    o.world_size = P;
    o.device.compute_units = 2;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    const std::int64_t count = 97;
    std::uint64_t seed = 900;
    for (ReduceOp op : kOps)
      for (AllReduceAlgo algo : kAlgos) {
        add_all_reduce(cases, P, count, DType::f32, op, algo, false, ++seed);
        // Overwrite part of the inputs with special values, differently per rank.
        Case& c = *cases.back();
        for (int r = 0; r < P; ++r) {
          auto* f = reinterpret_cast<float*>(c.emu[r].data());
          for (std::int64_t i = 0; i < count; ++i) {
            const std::uint64_t h = fusedcoll::hash_draw(seed, 12, r, i);
            switch (h % 6) {
              case 0:
                f[i] = std::bit_cast<float>(0x7FC00000u | std::uint32_t(r * 64 + i));
                break;
              case 1:
                f[i] = std::bit_cast<float>(0xFF800001u + std::uint32_t(r));
                break;  // sNaN
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
          c.ref[r] = c.emu[r];
        }
      }
    for (ReduceOp op : kOps) {
      ++seed;
      add_reduce_scatter(cases, uneven(P, 2, 40, seed), DType::f32, op, false, seed);
    }
    run_cases(world, cases);
  }
}

}  // namespace
