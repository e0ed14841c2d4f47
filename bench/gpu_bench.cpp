// fusedcoll-gpu-bench: the three fused operators on the GPU backend (single-GPU multi-rank mode),
// unfused vs scale_up vs scale_out at three sizes each, device time of the kernels (events) as the
// median of the repetitions; each result is checked against ref/ on integer inputs first. In the
// same run it measures the references the figures are divided by: device-to-device memcpy
// bandwidth (embedding pooling is a gather: its bandwidth / memcpy's says how close to the memory
// system it runs) and cuBLAS SGEMM on the same total shape as the expert GEMMs (tile throughput /
// SGEMM's). Output: a Markdown report on stdout and, with --out FILE, in FILE.
//
// In process mode (FUSEDCOLL_GPU_MODE=process, under mpiexec: one rank per process, docs/gpu.md)
// it runs EmbeddingAllToAll and GemvAllReduce, each rank checking its own output against ref/
// first; a row's time is the slowest rank's kernel time (median over repetitions). Their unfused
// baselines are fusedcoll's own (NCCL refuses several ranks on one GPU): the pooling kernel,
// then the push All-to-All kernel over the same IPC mappings or proxy; the GEMV kernel, then
// process mode's AllReduce (direct), its kernel time added to the GEMV's.
//
//   fusedcoll-gpu-bench [--quick] [--ranks P] [--reps N] [--out FILE]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/detail/cli.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/gpu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"
#include "gpu/runtime.hpp"
#if defined(FC_GPU_PROCESS)
#include <mpi.h>
#endif

#if defined(FUSEDCOLL_HAVE_BLAS) && defined(FC_GPU_CUDA)
#include <cublas_v2.h>
#endif

namespace {

namespace fc = fusedcoll;
using fc::Mode;

constexpr Mode kModes[] = {Mode::unfused, Mode::scale_up, Mode::scale_out};

struct Options {
  bool quick = false;
  int ranks = 4;
  int reps = 5;
  std::string out;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.
double memcpy_gbps(std::size_t bytes, int reps) {
  fc::gpu::DeviceBuffer a(bytes), b(bytes);
  gpuEvent_t e0, e1;
  FC_CHECK_GPU(gpuEventCreate(&e0));
  FC_CHECK_GPU(gpuEventCreate(&e1));
  std::vector<double> ms;
  for (int i = 0; i <= reps; ++i) {
    FC_CHECK_GPU(gpuEventRecord(e0, nullptr));
    FC_CHECK_GPU(gpuMemcpyAsync(b.get(), a.get(), bytes, gpuMemcpyDeviceToDevice, nullptr));
    FC_CHECK_GPU(gpuEventRecord(e1, nullptr));
    FC_CHECK_GPU(gpuEventSynchronize(e1));
    float t = 0;
    FC_CHECK_GPU(gpuEventElapsedTime(&t, e0, e1));
    if (i > 0) ms.push_back(t);  // the first copy warms up
  }
  (void)gpuEventDestroy(e0);
  (void)gpuEventDestroy(e1);
  return 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3) / 1e9;
}

/// cuBLAS SGEMM C[m, n] = A[m, k] * B[k, n] in GFLOP/s (0 when this build has no BLAS).
double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int reps) {
#if defined(FUSEDCOLL_HAVE_BLAS) && defined(FC_GPU_CUDA)
  if (m == 0 || n == 0 || k == 0) return 0;
  fc::gpu::DeviceBuffer a(static_cast<std::size_t>(m * k) * 4), b(static_cast<std::size_t>(k * n) * 4),
      c(static_cast<std::size_t>(m * n) * 4);
  FC_CHECK_GPU(gpuMemset(a.get(), 0, a.bytes()));
  FC_CHECK_GPU(gpuMemset(b.get(), 0, b.bytes()));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const float one = 1, zero = 0;
  gpuEvent_t e0, e1;
  FC_CHECK_GPU(gpuEventCreate(&e0));
  FC_CHECK_GPU(gpuEventCreate(&e1));
  std::vector<double> ms;
  for (int i = 0; i <= reps; ++i) {
    FC_CHECK_GPU(gpuEventRecord(e0, nullptr));
    // Row-major C = A B is column-major C^T = B^T A^T.
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                static_cast<int>(k), &one, b.as<float>(), static_cast<int>(n), a.as<float>(),
                static_cast<int>(k), &zero, c.as<float>(), static_cast<int>(n));
    FC_CHECK_GPU(gpuEventRecord(e1, nullptr));
    FC_CHECK_GPU(gpuEventSynchronize(e1));
    float t = 0;
    FC_CHECK_GPU(gpuEventElapsedTime(&t, e0, e1));
    if (i > 0) ms.push_back(t);
  }
  (void)gpuEventDestroy(e0);
  (void)gpuEventDestroy(e1);
  cublasDestroy(h);
  return 2.0 * m * n * k / (median(ms) * 1e-3) / 1e9;
#else
  (void)m, (void)n, (void)k, (void)reps;
  return 0;
#endif
}

/// Runs `call(mode)` reps + 1 times per mode (interleaved, the first round discarded) and returns
/// the median kernel time of each mode.
template <class Call>
std::vector<double> time_modes(fc::gpu::World& gpu, int reps, Call&& call) {
  std::vector<std::vector<double>> ms(3);
  for (int i = 0; i <= reps; ++i)
    for (int m = 0; m < 3; ++m) {
      call(kModes[m]);
      if (i > 0) ms[m].push_back(gpu.last_kernel_ms());
    }
  return {median(ms[0]), median(ms[1]), median(ms[2])};
}

template <class Data>
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// Checks every mode against ref/ on integer inputs of the problem's shape; throws on a mismatch.
template <class Problem, class Out, class RefCall, class GpuCall>
void verify(Problem pb, Out out, RefCall ref_call, GpuCall gpu_call) {
  pb.values = fc::ValueMode::integer;
  auto want = fc::make_world(pb);
  ref_call(fc::args_of(want));
  for (Mode mode : kModes) {
    auto got = fc::make_world(pb);
    for (auto& r : got) fc::poison(out(r).data(), out(r).size() * 4);
    gpu_call(fc::args_of(got), mode);
    for (std::size_t r = 0; r < got.size(); ++r)
      if (!same_bits<int>(out(got[r]), out(want[r])))
        throw fc::InternalError(std::string("fusedcoll-gpu-bench: ") + fc::to_string(mode) +
                                " differs from ref/ on rank " + std::to_string(r));
  }
}

/// The slowest rank's value in process mode (kernel times: a call ends with its slowest rank).
double slowest(const fc::gpu::World& gpu, double v) {
#if defined(FC_GPU_PROCESS)
  if (gpu.process_mode()) {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  }
#else
  (void)gpu;
#endif
  return v;
}

/// Process mode: this rank's call of every mode against ref/ (integer inputs), then the timing.
/// `out` picks a rank's output, `ref` runs ref/ over every rank's call, `call` this rank's op.
template <class Problem, class Out, class Ref, class Call>
std::vector<double> op_process(fc::gpu::World& gpu, Problem pb, int reps, Out&& out, Ref&& ref,
                               Call&& call) {
  pb.values = fc::ValueMode::integer;
  auto want = fc::make_world(pb);
  ref(fc::args_of(want));
  const auto me = static_cast<std::size_t>(gpu.rank());
  for (Mode mode : kModes) {
    auto got = fc::make_world(pb);
    fc::poison(out(got[me]).data(), out(got[me]).size() * 4);
    const auto args = fc::args_of(got);
    gpu.run([&](fc::Communicator& comm) { call(comm, args[me], mode); });
    if (!same_bits<int>(out(got[me]), out(want[me])))
      throw fc::InternalError(std::string("fusedcoll-gpu-bench: ") + fc::to_string(mode) +
                              " differs from ref/ on rank " + std::to_string(me));
  }
  pb.values = fc::ValueMode::random;
  auto data = fc::make_world(pb);
  const auto args = fc::args_of(data);
  std::vector<std::vector<double>> ms(3);
  for (int i = 0; i <= reps; ++i)
    for (int m = 0; m < 3; ++m) {
      gpu.run([&](fc::Communicator& comm) { call(comm, args[me], kModes[m]); });
      const double t = slowest(gpu, gpu.last_kernel_ms());
      if (i > 0) ms[static_cast<std::size_t>(m)].push_back(t);
    }
  return {median(ms[0]), median(ms[1]), median(ms[2])};
}

std::string fmt(double v, int prec = 3) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") o.quick = true;
    else if ((a == "--ranks" || a == "--reps") && i + 1 < argc) {
      try {
        (a == "--ranks" ? o.ranks : o.reps) =
            fc::detail::cli::parse_int(a, argv[++i], 1, a == "--ranks" ? 64 : 1000000);
      } catch (const fc::InvalidArgument& e) {
        std::cerr << "fusedcoll-gpu-bench: " << e.what() << "\n";
        return 2;
      }
    }
    else if (a == "--out" && i + 1 < argc) o.out = argv[++i];
    else {
      std::cerr << "usage: fusedcoll-gpu-bench [--quick] [--ranks P] [--reps N] [--out FILE]\n";
      return 2;
    }
  }
  if (o.ranks < 1 || o.reps < 1) {
    std::cerr << "fusedcoll-gpu-bench: --ranks and --reps must be >= 1\n";
    return 2;
  }
  if (!fc::gpu::available()) {
    std::cerr << "fusedcoll-gpu-bench: no " << fc::gpu::vendor() << " device visible\n";
    return 77;
  }
  try {
    fc::gpu::World gpu({.world_size = o.ranks, .timeout_s = 60});
    const int P = gpu.size();
    const bool leader = gpu.rank() == 0;  // process mode: rank 0 writes the report
    std::ostringstream md;
    md << "# fusedcoll GPU benchmark\n\n"
       << "device: " << gpu.device_name() << " (" << fc::gpu::vendor() << "), " << P
       << (gpu.process_mode()
               ? std::string(" ranks, one per process (process mode, FUSEDCOLL_GPU_PROXY=") +
                     (fc::env().gpu_proxy == fc::Env::GpuProxy::all ? "all: every peer through "
                                                                      "the host proxy"
                                                                    : "auto: same-node peers "
                                                                      "through IPC") +
                     "); the slowest rank's kernel time; unfused = the pooling kernel, then "
                     "fusedcoll's push All-to-All kernel (NCCL refuses several ranks on one GPU)"
               : std::string(" virtual ranks on one GPU, kernel time from events"))
       << ", median of " << o.reps
       << " repetitions; every mode checked bit for bit against ref/ on integer inputs first.\n\n";

    const double copy_gbps = memcpy_gbps(o.quick ? (16u << 20) : (512u << 20), o.reps);
    md << "device-to-device memcpy: " << fmt(copy_gbps, 1) << " GB/s (read + write)\n\n";
    md << "| op | size | unfused ms | scale_up ms | scale_out ms | up/unfused | out/unfused | reference |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    auto row = [&](const std::string& opname, const std::string& size, const std::vector<double>& t,
                   const std::string& reference) {
      md << "| " << opname << " | " << size << " | " << fmt(t[0]) << " | " << fmt(t[1]) << " | "
         << fmt(t[2]) << " | " << fmt(t[1] / t[0], 2) << " | " << fmt(t[2] / t[0], 2) << " | "
         << reference << " |\n";
      if (leader) std::cerr << opname << " " << size << " done\n";
    };

    if (gpu.process_mode()) {
      for (std::int64_t b :
           o.quick ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{128, 512, 2048}) {
        fc::EmbeddingProblem pb = fc::EmbeddingProblem::dlrm(P);
        pb.batch_sizes.assign(static_cast<std::size_t>(P), b);
        if (o.quick)
          for (auto& rows : pb.table_rows) rows = 100;
        row("embedding_alltoall", "B/rank=" + std::to_string(b),
            op_process(
                gpu, pb, o.reps, [](auto& r) -> std::vector<float>& { return r.output; },
                [](const auto& args) { fc::ref::embedding_alltoall(args); },
                [](fc::Communicator& comm, const auto& a, Mode m) {
                  fc::embedding_alltoall(comm, a, m);
                }),
            "baseline: pool + fusedcoll push All-to-All");
      }
      for (std::int64_t n :
           o.quick ? std::vector<std::int64_t>{256} : std::vector<std::int64_t>{1024, 4096, 8192}) {
        fc::GemvProblem pb = fc::GemvProblem::transformer(P);
        pb.n = n;
        if (o.quick) pb.k_splits.assign(static_cast<std::size_t>(P), 128);
        row("gemv_allreduce", "N=" + std::to_string(n),
            op_process(
                gpu, pb, o.reps, [](auto& r) -> std::vector<float>& { return r.y; },
                [](const auto& args) { fc::ref::gemv_allreduce(args); },
                [](fc::Communicator& comm, const auto& a, Mode m) {
                  fc::gemv_allreduce(comm, a, m);
                }),
            "baseline: GEMV + fusedcoll AllReduce (direct)");
      }
      md << "\nGemmAllToAll and the collectives run in process mode too; fusedcoll-perf "
            "--backend gpu measures them there (docs/benchmarking.md).\n";
      if (leader) std::cout << md.str();
      if (leader && !o.out.empty()) {
        std::ofstream f(o.out);
        f << md.str();
        if (!f) throw fc::BackendError("fusedcoll-gpu-bench: cannot write " + o.out);
      }
      return 0;
    }

    // EmbeddingAllToAll: DLRM shapes, batch per rank varied.
    for (std::int64_t b : o.quick ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{128, 512, 2048}) {
      fc::EmbeddingProblem pb = fc::EmbeddingProblem::dlrm(P);
      pb.batch_sizes.assign(static_cast<std::size_t>(P), b);
      if (o.quick)
        for (auto& rows : pb.table_rows) rows = 100;
      verify(pb, [](auto& r) -> std::vector<float>& { return r.output; },
             [](const auto& args) { fc::ref::embedding_alltoall(args); },
             [&](const auto& args, Mode m) { gpu.embedding_alltoall(args, m); });
      pb.values = fc::ValueMode::random;
      auto data = fc::make_world(pb);
      const auto args = fc::args_of(data);
      const auto t = time_modes(gpu, o.reps, [&](Mode m) { gpu.embedding_alltoall(args, m); });
      // Bytes the pooling must move at least: every looked-up row once, every output once.
      double bytes = 0;
      for (const auto& r : data) {
        for (const auto& idx : r.indices64) bytes += static_cast<double>(idx.size()) * pb.dim * 4;
        for (const auto& idx : r.indices32) bytes += static_cast<double>(idx.size()) * pb.dim * 4;
        bytes += static_cast<double>(r.output.size()) * 4;
      }
      const double best = std::min({t[0], t[1], t[2]});
      const double gbps = bytes / (best * 1e-3) / 1e9;
      row("embedding_alltoall", "B/rank=" + std::to_string(b), t,
          fmt(gbps, 1) + " GB/s = " + fmt(gbps / copy_gbps, 2) + " x memcpy");
    }

    // GemvAllReduce: Transformer decode, N varied.
    for (std::int64_t n : o.quick ? std::vector<std::int64_t>{256} : std::vector<std::int64_t>{1024, 4096, 8192}) {
      fc::GemvProblem pb = fc::GemvProblem::transformer(P);
      pb.n = n;
      if (o.quick) pb.k_splits.assign(static_cast<std::size_t>(P), 128);
      verify(pb, [](auto& r) -> std::vector<float>& { return r.y; },
             [](const auto& args) { fc::ref::gemv_allreduce(args); },
             [&](const auto& args, Mode m) { gpu.gemv_allreduce(args, m); });
      pb.values = fc::ValueMode::random;
      auto data = fc::make_world(pb);
      const auto args = fc::args_of(data);
      const auto t = time_modes(gpu, o.reps, [&](Mode m) { gpu.gemv_allreduce(args, m); });
      const double bytes = static_cast<double>(pb.n) * pb.k() * 4;  // W is read once
      const double gbps = bytes / (std::min({t[0], t[1], t[2]}) * 1e-3) / 1e9;
      row("gemv_allreduce", "N=" + std::to_string(n), t,
          fmt(gbps, 1) + " GB/s of W = " + fmt(gbps / copy_gbps, 2) + " x memcpy");
    }

    // GemmAllToAll: MoE combine, rows per (source, expert) varied.
    for (std::int64_t rows : o.quick ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{64, 256, 1024}) {
      fc::GemmProblem pb = fc::GemmProblem::moe(P);
      if (o.quick) pb.k = 64;
      pb.random_routing(2 * rows);
      verify(pb, [](auto& r) -> std::vector<float>& { return r.output; },
             [](const auto& args) { fc::ref::gemm_alltoall(args); },
             [&](const auto& args, Mode m) { gpu.gemm_alltoall(args, m); });
      pb.values = fc::ValueMode::random;
      auto data = fc::make_world(pb);
      const auto args = fc::args_of(data);
      const auto t = time_modes(gpu, o.reps, [&](Mode m) { gpu.gemm_alltoall(args, m); });
      std::int64_t total_rows = 0;
      for (auto c : pb.counts) total_rows += c;
      const double flops = 2.0 * total_rows * pb.k * pb.n;
      const double gflops = flops / (std::min({t[0], t[1], t[2]}) * 1e-3) / 1e9;
      const double blas = sgemm_gflops(total_rows, pb.n, pb.k, o.reps);
      row("gemm_alltoall", "rows=" + std::to_string(total_rows), t,
          fmt(gflops, 0) + " GFLOP/s" +
              (blas > 0 ? " = " + fmt(gflops / blas, 3) + " x cuBLAS SGEMM (" + fmt(blas, 0) + ")"
                        : " (no BLAS in this build)"));
    }

    std::cout << md.str();
    if (!o.out.empty()) {
      std::ofstream f(o.out);
      f << md.str();
      if (!f) throw fc::BackendError("fusedcoll-gpu-bench: cannot write " + o.out);
    }
  } catch (const std::exception& e) {
    std::cerr << "fusedcoll-gpu-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
