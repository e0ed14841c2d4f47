#pragma once
// A user's kernel over the corners of the public device API that the examples do not reach
// (tests/gpu/gpu_kernels_test.cpp, gpu_process_test.cpp), written only against
// fusedcoll/kernel.hpp like any user's kernel, with what each rank must end with computed on the
// host: puts of elements that are not floats, to an odd byte offset (the workgroup's byte path),
// put_rows_nbi with strides, fence and quiet between puts, a flag set with SignalOp::set and
// waited for with ==, a counter waited for with > and !=, signal_fetch, and signal_fetch_add's one
// last adder per launch.

#include <cstdint>
#include <vector>

#include "fusedcoll/kernel.hpp"

namespace probe {

namespace fc = fusedcoll;

struct Params {
  fc::Symmetric<std::int64_t> words;     ///< [n]: this rank's words
  fc::Symmetric<std::int64_t> inbox;     ///< [P * n]: slot s holds rank s's words
  fc::Symmetric<unsigned char> bytes;    ///< [nb]: this rank's bytes
  fc::Symmetric<unsigned char> bytebox;  ///< [1 + P * nb]: rank s's bytes at 1 + s * nb
  fc::Symmetric<float> tile;             ///< [rows, cols]: this rank's tile
  fc::Symmetric<float> grid;             ///< [P * rows, ld]: rank s's tile at row s * rows
  fc::Symmetric<std::int64_t> result;    ///< [2]: the arrivals seen, how many WGs were last
  fc::Signals sig;                       ///< [0] arrivals (add), [1] flag (set), [2] done
  std::uint64_t arrive_target, flag_value, done_target;
  std::int64_t n, nb, rows, cols, ld;
};

/// Every workgroup w sends this rank's words, bytes and tile to ranks me + 1 + w, me + 1 + w +
/// grid, ... (mod P), then counts itself on the local done counter; workgroup 0 waits for every
/// rank's arrival and flag and records what it saw.
struct Corners {
  static constexpr const char* name = "probe_corners";
  using Params = probe::Params;
  template <class Wg>
  FC_KERNEL_BODY(Wg) run(Wg& wg, const Params& p) {
    const int P = wg.world_size(), me = wg.rank();
    for (int j = wg.wg(); j < P; j += wg.num_wgs()) {
      const int q = (me + 1 + j) % P;
      wg.put_nbi(q, p.inbox, me * p.n, wg.local(p.words), p.n);
      wg.fence();
      wg.put_nbi(q, p.bytebox, 1 + me * p.nb, wg.local(p.bytes), p.nb);
      wg.put_rows_nbi(q, p.grid, me * p.rows * p.ld, p.ld, wg.local(p.tile), p.cols, p.rows,
                      p.cols);
      wg.quiet();
      wg.signal_op(q, p.sig[0], fc::SignalOp::add, 1);
      wg.signal_op(q, p.sig[1], fc::SignalOp::set, p.flag_value);
    }
    if (wg.signal_fetch_add(p.sig[2], 1) + 1 == p.done_target)
      wg.compute("last", fc::cost::none(), [&] {
        if (wg.thread_rank() == 0) wg.local(p.result)[1] += 1;
      });
    if (wg.wg() != 0) FC_RETURN;
    FC_WAIT_UNTIL(wg, p.sig[0], fc::Cmp::gt, p.arrive_target - 1);
    FC_WAIT_UNTIL(wg, p.sig[1], fc::Cmp::eq, p.flag_value);
    FC_WAIT_UNTIL(wg, p.sig[0], fc::Cmp::ne, p.arrive_target - P - 1);
    const std::uint64_t seen = wg.signal_fetch(p.sig[0]);
    wg.compute("record", fc::cost::none(), [&] {
      if (wg.thread_rank() == 0) wg.local(p.result)[0] = static_cast<std::int64_t>(seen);
    });
    FC_RETURN;
  }
};

/// Rank `s`'s inputs: values that encode (rank, index), so that a misrouted element shows.
inline std::vector<std::int64_t> words_of(int s, std::int64_t n) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    w[static_cast<std::size_t>(i)] = (std::int64_t{s} << 40) + i * 3 + 1;
  return w;
}
inline std::vector<unsigned char> bytes_of(int s, std::int64_t nb) {
  std::vector<unsigned char> b(static_cast<std::size_t>(nb));
  for (std::int64_t i = 0; i < nb; ++i)
    b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(s * 37 + i + 1);
  return b;
}
inline std::vector<float> tile_of(int s, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i)
    t[static_cast<std::size_t>(i)] = static_cast<float>(s * 1000 + i) + 0.5f;
  return t;
}

}  // namespace probe
