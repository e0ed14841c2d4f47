// fusedcoll's collectives on the MPI backend against ref/, bit for bit. Every rank builds every
// rank's memory block (inputs are pure functions of seed, stream and rank), runs the MPI
// collective on its own block, runs ref/ over all blocks, and memcmps its own block whole: the
// output must match, inputs must be left alone (except in place), and nothing outside the
// receive regions may be written (gaps are poisoned). Many cases run back to back on one
// communicator, which also exercises window growth and cumulative signal targets.

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
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"
#include "tests/mpi/mpi_world.hpp"

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

using Bytes = std::vector<unsigned char>;

const std::int64_t kCounts[] = {0, 1, 7, 1000};  // 1000 is not divisible by 3
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
const DType kReducible[] = {DType::f32, DType::i32, DType::i64};
const AllReduceAlgo kAlgos[] = {AllReduceAlgo::direct, AllReduceAlgo::ring};

void mpi_call(Communicator& c, const AllReduceArgs& a) { fusedcoll::all_reduce(c, a); }
void mpi_call(Communicator& c, const AllToAllvArgs& a) { fusedcoll::all_to_allv(c, a); }
void mpi_call(Communicator& c, const ReduceScatterArgs& a) { fusedcoll::reduce_scatter(c, a); }
void mpi_call(Communicator& c, const AllGatherArgs& a) { fusedcoll::all_gather(c, a); }
void mpi_call(Communicator& c, const BroadcastArgs& a) { fusedcoll::broadcast(c, a); }
void ref_call(std::span<const AllReduceArgs> a) { fusedcoll::ref::all_reduce(a); }
void ref_call(std::span<const AllToAllvArgs> a) { fusedcoll::ref::all_to_allv(a); }
void ref_call(std::span<const ReduceScatterArgs> a) { fusedcoll::ref::reduce_scatter(a); }
void ref_call(std::span<const AllGatherArgs> a) { fusedcoll::ref::all_gather(a); }
void ref_call(std::span<const BroadcastArgs> a) { fusedcoll::ref::broadcast(a); }

/// One collective call. `mine` is this rank's block for MPI; `ref[r]` is rank r's block for ref/,
/// identical to `mine` (for r = this rank) before the run.
struct Case {
  std::string what;
  Bytes mine;
  std::vector<Bytes> ref;
  std::function<void(Communicator&)> on_mpi;
  std::function<void()> on_ref;
};

using Cases = std::vector<std::unique_ptr<Case>>;

/// Regions of a rank's block, each 64-byte aligned with a poisoned gap after it.
struct Layout {
  std::size_t size = 0;
  std::size_t add(std::size_t bytes) {
    const std::size_t at = size;
    size += (bytes + 63) / 64 * 64 + 64;
    return at;
  }
};

int me() { return fctest::world().rank(); }
int world_size() { return fctest::world().size(); }

template <class Args>
Case& add_case(Cases& cases, std::string what, const std::vector<std::size_t>& sizes,
               const std::function<void(int, unsigned char*)>& fill,
               std::function<Args(int, unsigned char*)> make) {
  auto c = std::make_unique<Case>();
  Case* cp = c.get();
  cp->what = std::move(what);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    cp->ref.emplace_back(sizes[r]);
    fusedcoll::poison(cp->ref[r].data(), sizes[r]);
    fill(static_cast<int>(r), cp->ref[r].data());
  }
  cp->mine = cp->ref[static_cast<std::size_t>(me())];
  cp->on_mpi = [cp, make](Communicator& comm) {
    mpi_call(comm, make(comm.rank(), cp->mine.data()));
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

/// Runs every case on MPI (all ranks make every call, in order), then ref/, and compares this
/// rank's block.
void run_cases(Cases& cases) {
  for (auto& c : cases) c->on_mpi(fctest::world());
  for (auto& c : cases) {
    c->on_ref();
    const Bytes& e = c->mine;
    const Bytes& f = c->ref[static_cast<std::size_t>(me())];
    if (std::memcmp(e.data(), f.data(), e.size()) == 0) continue;
    std::size_t i = 0;
    while (e[i] == f[i]) ++i;
    ADD_FAILURE() << c->what << ": rank " << me() << " differs from ref first at byte " << i
                  << " of " << e.size() << " (mpi 0x" << std::hex << int(e[i]) << ", ref 0x"
                  << int(f[i]) << std::dec << ")";
  }
}

std::size_t esize(DType t) { return fusedcoll::dtype_size(t); }

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

/// Uneven counts (zeros included), send segments in reverse peer order and receive segments
/// rotated by rank, both with gaps.
void add_all_to_allv(Cases& cases, int P, DType dt, std::int64_t scale, std::uint64_t seed) {
  const std::size_t e = esize(dt);
  std::vector<std::vector<std::int64_t>> c(P, std::vector<std::int64_t>(P));
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 7, r, q);
      c[r][q] = (h % 4 == 0) ? 0 : static_cast<std::int64_t>(h >> 8) % 37 * scale + (h >> 20) % 3;
    }
  std::vector<std::vector<std::int64_t>> sdispl(P), rdispl(P);
  std::vector<std::size_t> sizes(P), send_at(P), recv_at(P);
  for (int r = 0; r < P; ++r) {
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
        fusedcoll::fill_values(m + send_at, count, dt, seed, 5, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return BroadcastArgs{r == root ? m + send_at : nullptr, m + recv_at, count, dt, root};
      });
}

TEST(MpiCollectives, AllReduceMatchesRef) {
  const int P = world_size();
  Cases cases;
  std::uint64_t seed = 100;
  for (std::int64_t count : kCounts)
    for (DType dt : kReducible)
      for (ReduceOp op : kOps)
        for (AllReduceAlgo algo : kAlgos)
          for (bool in_place : {false, true})
            add_all_reduce(cases, P, count, dt, op, algo, in_place, ++seed);
  // Several fold pieces per chunk, and a window that must grow.
  for (AllReduceAlgo algo : kAlgos)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      add_all_reduce(cases, P, 3 * 32768 * P + 3, DType::f32, op, algo, op == ReduceOp::avg,
                     ++seed);
  run_cases(cases);
}

TEST(MpiCollectives, AllToAllvMatchesRef) {
  const int P = world_size();
  Cases cases;
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
  run_cases(cases);
}

TEST(MpiCollectives, ReduceScatterMatchesRef) {
  const int P = world_size();
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
  run_cases(cases);
}

TEST(MpiCollectives, AllGatherMatchesRef) {
  const int P = world_size();
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
  run_cases(cases);
}

TEST(MpiCollectives, BroadcastMatchesRef) {
  const int P = world_size();
  Cases cases;
  std::uint64_t seed = 500;
  for (int root = 0; root < P; ++root)
    for (std::int64_t count : kCounts)
      for (DType dt : {DType::f32, DType::bf16, DType::i64})
        for (bool in_place : {false, true})
          add_broadcast(cases, P, count, dt, root, in_place, ++seed);
  add_broadcast(cases, P, 70001, DType::f16, P - 1, false, ++seed);
  run_cases(cases);
}

// The worked example of docs/semantics.md: with P = 3 the two algorithms' orders give different
// bits, and each must give its own.
TEST(MpiCollectives, DirectAndRingOrdersDiffer) {
  if (world_size() != 3) GTEST_SKIP() << "the worked example needs exactly 3 ranks";
  const float v[3] = {1e8f, 1.0f, -1e8f};
  std::vector<float> send(3, v[me()]), direct(3), ring(3);
  auto& comm = fctest::world();
  fusedcoll::all_reduce(
      comm, {send.data(), direct.data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::direct});
  fusedcoll::all_reduce(
      comm, {send.data(), ring.data(), 3, DType::f32, ReduceOp::sum, AllReduceAlgo::ring});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(std::bit_cast<std::uint32_t>(direct[i]), 0u) << i;
  EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[0]), 0u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[1]), 0x3F800000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(ring[2]), 0u);
}

// NaN payloads, signed zeros and infinities make the fold order visible in the bits.
TEST(MpiCollectives, SpecialValuesFollowTheFoldOrder) {
  const int P = world_size();
  Cases cases;
  const std::int64_t count = 97;
  std::uint64_t seed = 900;
  for (ReduceOp op : kOps)
    for (AllReduceAlgo algo : kAlgos) {
      add_all_reduce(cases, P, count, DType::f32, op, algo, false, ++seed);
      Case& c = *cases.back();
      for (int r = 0; r < P; ++r) {
        auto* f = reinterpret_cast<float*>(c.ref[r].data());
        for (std::int64_t i = 0; i < count; ++i) {
          const std::uint64_t h = fusedcoll::hash_draw(seed, 12, r, i);
          switch (h % 6) {
            case 0:
              f[i] = std::bit_cast<float>(0x7FC00000u | std::uint32_t(r * 64 + i));
              break;
            case 1:
              f[i] = std::bit_cast<float>(0xFF800001u + std::uint32_t(r));
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
      }
      c.mine = c.ref[static_cast<std::size_t>(me())];
    }
  run_cases(cases);
}

}  // namespace

namespace {

// barrier(comm) orders ranks: what a rank put into a peer's buffer with MPI before the barrier is
// visible to that peer after it. Interleaved with collectives, it must not disturb their slots.
TEST(MpiCollectives, BarrierOrdersAndInterleaves) {
  auto& comm = fctest::world();
  const int P = world_size();
  int token = -1;
  MPI_Win win = MPI_WIN_NULL;
  MPI_Win_create(&token, sizeof token, sizeof token, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_lock_all(0, win);
  const int mine = me() * 10 + 1;
  MPI_Put(&mine, 1, MPI_INT, (me() + 1) % P, 0, 1, MPI_INT, win);
  MPI_Win_flush_all(win);
  fusedcoll::barrier(comm);
  MPI_Win_sync(win);
  EXPECT_EQ(token, ((me() + P - 1) % P) * 10 + 1) << "rank " << me();
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  Cases cases;
  add_all_reduce(cases, P, 100, DType::f32, ReduceOp::sum, AllReduceAlgo::ring, false, 77);
  add_broadcast(cases, P, 100, DType::i64, P - 1, true, 78);
  for (int i = 0; i < 3; ++i) fusedcoll::barrier(comm);
  run_cases(cases);
}

}  // namespace
