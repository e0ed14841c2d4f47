#pragma once
// Users' kernels on the GPU backend, one rank's call each, checked against their oracles by
// memcmp: shared by the single-GPU suite (gpu_kernels_test.cpp) and process mode's
// (gpu_process_test.cpp). The kernels are examples/kernels' and tests/gpu/kernel_probe.hpp's,
// registered for these programs by fusedcoll_add_kernel (tests/gpu/CMakeLists.txt). Plain host
// code: a mismatch comes back as a message naming rank, buffer, first differing element and both
// values.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/kernel_launch.hpp"
#include "kernels/ag_gemm.hpp"
#include "kernels/ag_gemm_oracle.hpp"
#include "kernels/tutorial.hpp"
#include "tests/gpu/kernel_probe.hpp"

namespace fctest::kernels {

namespace fc = fusedcoll;

/// "" when `got` and `want` are the same bytes, else where they first differ.
template <class T>
std::string first_difference(int rank, const char* buffer, const std::vector<T>& got,
                             const std::vector<T>& want) {
  if (got.size() != want.size())
    return "rank " + std::to_string(rank) + " '" + buffer + "': " + std::to_string(got.size()) +
           " elements, expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::size_t differ = 0;
      for (std::size_t j = i; j < got.size(); ++j)
        differ += std::memcmp(&got[j], &want[j], sizeof(T)) != 0 ? 1 : 0;
      char values[128];
      if constexpr (std::is_floating_point_v<T>)
        std::snprintf(values, sizeof values, "expected %.9g, got %.9g",
                      static_cast<double>(want[i]), static_cast<double>(got[i]));
      else
        std::snprintf(values, sizeof values, "expected %lld, got %lld",
                      static_cast<long long>(want[i]), static_cast<long long>(got[i]));
      return "rank " + std::to_string(rank) + " '" + buffer + "': first difference at element " +
             std::to_string(i) + " of " + std::to_string(got.size()) + ": " + values + " (" +
             std::to_string(differ) + " elements differ)";
    }
  return "";
}

/// The tutorial's fused ReduceScatter + bias + ReLU (examples/kernels/tutorial.hpp) at `chunk`
/// floats per rank, launched with `grid` workgroups: "" when y is the oracle's.
inline std::string tutorial_case(fc::Communicator& comm, std::int64_t chunk, int grid) {
  const int P = comm.size(), r = comm.rank();
  const std::vector<float> y = tutorial::reduce_scatter_relu(comm, tutorial::x_of(r, P, chunk),
                                                             tutorial::bias_of(r, chunk), grid);
  return first_difference(r, "y", y, tutorial::oracle(r, P, chunk));
}

/// Rows of A per rank: uneven, one rank without rows, not multiples of the tile (as the emulator's
/// test of the example).
inline std::vector<std::int64_t> ag_gemm_rows(int P, std::int64_t scale) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) rows[static_cast<std::size_t>(s)] = (s * 13 + 5) % 41 * scale;
  if (P > 2) rows[1] = 0;
  return rows;
}

/// AllGather + GEMM (examples/kernels/ag_gemm.hpp), fused or unfused: "" when C is the oracle's.
inline std::string ag_gemm_case(fc::Communicator& comm, const std::vector<std::int64_t>& rows,
                                std::int64_t k, std::int64_t n, bool fused) {
  const int r = comm.rank();
  const std::vector<float> c =
      ag_gemm::run(comm, rows, k, n, ag_gemm::a_rows_of(r, rows[static_cast<std::size_t>(r)], k),
                   ag_gemm::b_of(r, k, n), fused);
  return first_difference(r, fused ? "C (fused)" : "C (unfused)", c,
                          ag_gemm::oracle(r, rows, k, n));
}

/// The probe's buffers and signals, allocated once per World; `launch` runs it and checks.
struct ProbeCase {
  probe::Params p{};
  std::uint64_t launches = 0;

  ProbeCase(fc::Communicator& comm, std::int64_t n, std::int64_t nb, std::int64_t rows,
            std::int64_t cols, std::int64_t ld) {
    const int P = comm.size();
    p.n = n;
    p.nb = nb;
    p.rows = rows;
    p.cols = cols;
    p.ld = ld;
    p.words = fc::symmetric<std::int64_t>(comm, "probe.words", n);
    p.inbox = fc::symmetric<std::int64_t>(comm, "probe.inbox", P * n);
    p.bytes = fc::symmetric<unsigned char>(comm, "probe.bytes", nb);
    p.bytebox = fc::symmetric<unsigned char>(comm, "probe.bytebox", 1 + P * nb);
    p.tile = fc::symmetric<float>(comm, "probe.tile", rows * cols);
    p.grid = fc::symmetric<float>(comm, "probe.grid", P * rows * ld);
    p.result = fc::symmetric<std::int64_t>(comm, "probe.result", 2);
    p.sig = fc::signals(comm, "probe.sig", 3);
    const int r = comm.rank();
    fc::upload(comm, p.words, 0, probe::words_of(r, n).data(), n);
    fc::upload(comm, p.bytes, 0, probe::bytes_of(r, nb).data(), nb);
    fc::upload(comm, p.tile, 0, probe::tile_of(r, rows, cols).data(), rows * cols);
  }

  /// One launch of `grid` workgroups: "" when every rank's buffers are what the probe says.
  std::string launch(fc::Communicator& comm, int grid) {
    const int P = comm.size(), r = comm.rank();
    ++launches;
    p.arrive_target = fc::expect(comm, p.sig[0], static_cast<std::uint64_t>(P));
    p.flag_value = 100 + launches;
    p.done_target = fc::expect(comm, p.sig[2], static_cast<std::uint64_t>(grid));
    const std::vector<std::int64_t> zero(2, 0);
    fc::upload(comm, p.result, 0, zero.data(), 2);
    fc::launch<probe::Corners>(comm, grid, p);

    std::vector<std::int64_t> inbox(static_cast<std::size_t>(P * p.n)), want_inbox;
    fc::download(comm, p.inbox, 0, inbox.data(), P * p.n);
    std::vector<unsigned char> box(static_cast<std::size_t>(1 + P * p.nb)), want_box(1, 0);
    fc::download(comm, p.bytebox, 0, box.data(), 1 + P * p.nb);
    std::vector<float> g(static_cast<std::size_t>(P * p.rows * p.ld)),
        want_g(static_cast<std::size_t>(P * p.rows * p.ld), 0.0f);
    fc::download(comm, p.grid, 0, g.data(), P * p.rows * p.ld);
    std::vector<std::int64_t> result(2);
    fc::download(comm, p.result, 0, result.data(), 2);
    for (int s = 0; s < P; ++s) {
      const auto w = probe::words_of(s, p.n);
      want_inbox.insert(want_inbox.end(), w.begin(), w.end());
      const auto b = probe::bytes_of(s, p.nb);
      want_box.insert(want_box.end(), b.begin(), b.end());
      const auto t = probe::tile_of(s, p.rows, p.cols);
      for (std::int64_t i = 0; i < p.rows; ++i)
        for (std::int64_t c = 0; c < p.cols; ++c)
          want_g[static_cast<std::size_t>((s * p.rows + i) * p.ld + c)] =
              t[static_cast<std::size_t>(i * p.cols + c)];
    }
    const std::vector<std::int64_t> want_result{static_cast<std::int64_t>(p.arrive_target), 1};
    for (std::string d :
         {first_difference(r, "inbox", inbox, want_inbox),
          first_difference(r, "bytebox", box, want_box), first_difference(r, "grid", g, want_g),
          first_difference(r, "result (arrivals seen, last adders)", result, want_result)})
      if (!d.empty()) return d;
    return "";
  }
};

}  // namespace fctest::kernels
