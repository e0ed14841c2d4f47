#pragma once
/// @file
/// A test kit for users' kernels (docs/kernels.md, "Testing"): runs SPMD code that launches a
/// kernel on the emulator over several world sizes and fuzz seeds, with the protocol checker on,
/// and compares every rank's output buffers with an oracle's, byte for byte. A mismatch reports
/// the world size and fuzz seed that replay it, the rank, the buffer, the first differing element
/// and both values. No test framework is needed; with GoogleTest:
///
/// ```
/// const auto result = fusedcoll::testing::check(
///     [&](fusedcoll::Communicator& comm, fusedcoll::testing::Buffers& out) {
///       out.add("y", my_op(comm, inputs));                        // what this rank produced
///     },
///     [&](int world_size, int rank, fusedcoll::testing::Buffers& want) {
///       want.add("y", my_oracle(world_size, rank, inputs));       // what it should produce
///     });
/// EXPECT_TRUE(result) << result.message;
/// ```

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::testing {

/// Named buffers of one rank: what it produced, or what the oracle says it should produce.
class Buffers {
 public:
  struct Entry {
    std::string name;
    std::vector<std::byte> bytes;
    std::size_t elem_size = 1;
    /// How an element prints in a report ("1.5 (0x3fc00000)").
    std::string (*print)(const std::byte*) = nullptr;
  };

  /// Records a copy of `count` elements at `data` under `name`.
  template <class T>
  void add(const std::string& name, const T* data, std::int64_t count) {
    static_assert(std::is_trivially_copyable_v<T>, "buffers are compared byte for byte");
    FC_ENFORCE(count >= 0, "testing::Buffers::add '", name, "': count ", count, " is negative");
    Entry e;
    e.name = name;
    e.bytes.resize(static_cast<std::size_t>(count) * sizeof(T));
    if (count > 0) std::memcpy(e.bytes.data(), data, e.bytes.size());
    e.elem_size = sizeof(T);
    e.print = &print_element<T>;
    entries_.push_back(std::move(e));
  }
  template <class T>
  void add(const std::string& name, const std::vector<T>& values) {
    add(name, values.data(), static_cast<std::int64_t>(values.size()));
  }

  const std::vector<Entry>& entries() const noexcept { return entries_; }

 private:
  template <class T>
  static std::string print_element(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    std::ostringstream os;
    if constexpr (std::is_floating_point_v<T>) {
      os << std::setprecision(9) << v << " (0x" << std::hex;
      for (std::size_t i = sizeof(T); i-- > 0;)
        os << std::setw(2) << std::setfill('0') << static_cast<unsigned>(p[i]);
      os << ")";
    } else if constexpr (std::is_integral_v<T>) {
      os << +v;
    } else {
      os << "0x" << std::hex;
      for (std::size_t i = sizeof(T); i-- > 0;)
        os << std::setw(2) << std::setfill('0') << static_cast<unsigned>(p[i]);
    }
    return os.str();
  }

  std::vector<Entry> entries_;
};

/// Where `check` runs the code.
struct Options {
  /// Every world size to run.
  std::vector<int> world_sizes{1, 2, 3, 4, 5, 6, 7, 8};
  /// Every fuzz seed to run at each world size; 0 runs without fuzzing.
  std::vector<std::uint64_t> fuzz_seeds{0, 1, 2, 3, 4};
  /// The protocol checker (docs/emulator.md, "Protocol checking").
  bool check_protocol = true;
  /// Seconds a wait may block before the run fails with a hang report.
  double timeout_s = 10;
  /// The rest of the worlds' options (compute units, clock, link model, ...); `world_size`,
  /// `fuzz_seed`, `check_protocol` and `timeout_s` are set from the fields above.
  emu::WorldOptions world{};
};

/// The outcome of `check`: `ok`, or the first failure, which `message` describes in full.
struct Result {
  bool ok = true;
  std::string message;
  /// The world size and fuzz seed of the failing run (replay: `Options{.world_sizes = {P},
  /// .fuzz_seeds = {seed}}`).
  int world_size = 0;
  std::uint64_t fuzz_seed = 0;
  /// The error the run threw (`ErrorCode::timeout` for a hang, `protocol` for the checker), or
  /// `ok` when the run completed and its buffers differ from the oracle's.
  ErrorCode error = ErrorCode::ok;
  explicit operator bool() const noexcept { return ok; }
};

namespace detail {

inline std::string where(int world_size, std::uint64_t seed) {
  return fusedcoll::detail::make_string("fusedcoll::testing: world size ", world_size,
                                        ", fuzz seed ", seed, ": ");
}

inline std::string replay(int world_size, std::uint64_t seed) {
  return fusedcoll::detail::make_string("\n  replay: testing::Options{.world_sizes = {", world_size,
                                        "}, .fuzz_seeds = {", seed, "}} (or an emu::World of ",
                                        world_size, " ranks with fuzz_seed ", seed, ")");
}

/// "" when `got` equals `want` byte for byte, else what differs first.
inline std::string compare(int rank, const Buffers& got, const Buffers& want) {
  for (const Buffers::Entry& w : want.entries()) {
    const Buffers::Entry* g = nullptr;
    for (const Buffers::Entry& e : got.entries())
      if (e.name == w.name) g = &e;
    if (g == nullptr)
      return fusedcoll::detail::make_string("rank ", rank, " produced no buffer '", w.name, "'");
    if (g->bytes.size() != w.bytes.size() || g->elem_size != w.elem_size)
      return fusedcoll::detail::make_string("rank ", rank, ", buffer '", w.name,
                                            "': ", g->bytes.size(), " bytes, expected ",
                                            w.bytes.size());
    if (w.bytes.empty() || std::memcmp(g->bytes.data(), w.bytes.data(), w.bytes.size()) == 0)
      continue;
    std::size_t i = 0;
    while (std::memcmp(g->bytes.data() + i * w.elem_size, w.bytes.data() + i * w.elem_size,
                       w.elem_size) == 0)
      ++i;
    const std::size_t n = w.bytes.size() / w.elem_size;
    std::size_t differ = 0;
    for (std::size_t j = i; j < n; ++j)
      differ += std::memcmp(g->bytes.data() + j * w.elem_size, w.bytes.data() + j * w.elem_size,
                            w.elem_size) != 0;
    return fusedcoll::detail::make_string(
        "rank ", rank, ", buffer '", w.name, "': first difference at element ", i, " of ", n,
        ": expected ", w.print(w.bytes.data() + i * w.elem_size), ", got ",
        w.print(g->bytes.data() + i * w.elem_size), " (", differ, " elements differ)");
  }
  for (const Buffers::Entry& g : got.entries()) {
    bool wanted = false;
    for (const Buffers::Entry& w : want.entries()) wanted |= w.name == g.name;
    if (!wanted)
      return fusedcoll::detail::make_string("rank ", rank, " produced buffer '", g.name,
                                            "', which the oracle does not have");
  }
  return "";
}

}  // namespace detail

/// Runs `run` on every rank of an emulator world for each world size and fuzz seed of
/// `options`, then compares what each rank recorded with what `oracle` says that rank of a world
/// of that size should record. Stops at the first failure: a rank whose buffers differ, or a run
/// that threw (a hang report, a protocol error, any exception), and says which world size and
/// seed replay it.
inline Result check(const std::function<void(Communicator&, Buffers&)>& run,
                    const std::function<void(int world_size, int rank, Buffers&)>& oracle,
                    const Options& options = {}) {
  for (int P : options.world_sizes)
    for (std::uint64_t seed : options.fuzz_seeds) {
      Result r;
      r.world_size = P;
      r.fuzz_seed = seed;
      std::vector<Buffers> got(static_cast<std::size_t>(P > 0 ? P : 0));
      try {
        emu::WorldOptions wo = options.world;
        wo.world_size = P;
        wo.fuzz_seed = seed;
        wo.check_protocol = options.check_protocol;
        wo.timeout_s = options.timeout_s;
        emu::World world(wo);
        world.run(
            [&](Communicator& comm) { run(comm, got[static_cast<std::size_t>(comm.rank())]); });
      } catch (const Error& e) {
        r.ok = false;
        r.error = e.code();
        r.message = detail::where(P, seed) + e.what() + detail::replay(P, seed);
        return r;
      } catch (const std::exception& e) {
        r.ok = false;
        r.error = ErrorCode::internal;
        r.message = detail::where(P, seed) + e.what() + detail::replay(P, seed);
        return r;
      }
      for (int rank = 0; rank < P; ++rank) {
        Buffers want;
        oracle(P, rank, want);
        const std::string diff = detail::compare(rank, got[static_cast<std::size_t>(rank)], want);
        if (!diff.empty()) {
          r.ok = false;
          r.message = detail::where(P, seed) + diff + detail::replay(P, seed);
          return r;
        }
      }
    }
  return Result{};
}

}  // namespace fusedcoll::testing
