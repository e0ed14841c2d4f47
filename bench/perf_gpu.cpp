// fusedcoll-perf --backend gpu: the collectives on the GPU backend's single-GPU multi-rank world
// (gpu::World, P ranks on one device), against the closest honest alternative on that device,
// with the columns of the CPU backends (docs/benchmarking.md).
//
// The alternative is not NCCL: NCCL refuses two ranks of one communicator on the same GPU
// ("Duplicate GPU detected", an ncclInvalidUsage error since NCCL 2.5, whose topology search
// assumes one GPU per rank; NVIDIA/nccl#418), and fusedcoll's GPU backend has no one-rank-per-GPU
// mode to set beside NCCL's. The baseline is what a program holding P ranks' buffers on one
// device does without fusedcoll: the copy engines (one device-to-device memcpy per block) for
// All-to-All, AllGather and Broadcast, and one fold kernel for AllReduce and ReduceScatter that
// reads every rank's buffer in rank order with ref/'s arithmetic (gpu/collective_exec.hpp, the
// order of AllReduce `direct`), uncompressed. The plan of copies and folds is perf_baseline.hpp,
// whose host run tests/perf_baseline_test.cpp checks against ref/ on machines without a GPU.
//
// Times are device times, the median of -n calls after -w warm-up calls: fusedcoll's is
// gpu::World::last_kernel_ms (the call's kernels; its arguments are host memory, uploaded and
// downloaded around them, untimed), the baseline's the events around its copies or kernel on
// device-resident buffers. Check (-c 1): fusedcoll's outputs bit for bit against ref/ (with the
// wire options), the baseline's on integer inputs against ref/ without compression, as for MPI.
//
// Process mode (FUSEDCOLL_GPU_MODE=process, under mpiexec: one rank per process, docs/gpu.md)
// runs as --backend mpi does (perf_mpi.cpp): every process builds every rank's inputs, calls its
// own rank's collective, and rank 0 prints. The baseline is the strongest collective that the
// build and the ranks' devices allow (ProcessBaseline), named in the table's header: NCCL on
// device buffers where the CUDA toolkit had NCCL at build time and every rank has its own GPU
// (NCCL refuses ranks sharing one), else Open MPI on device buffers where it is CUDA-aware, else
// Open MPI on the host buffers (Debian's is not CUDA-aware). Both sides are timed alike, as the
// wall time of the whole call between barriers (fusedcoll's includes copying its host arguments
// to the device and the result back; a device baseline's inputs stay on the device), interleaved
// per round; the check is each rank's own output against ref/, summed on rank 0. The fused
// operators run there too (the emulator's and MPI's columns: unfused against scale_up and
// scale_out, fused_world), their baseline process mode's unfused form, named in the header.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fusedcoll/env.hpp"
#include "fusedcoll/gpu.hpp"
#include "fusedcoll/inputs.hpp"
#include "gpu/runtime.hpp"
#include "perf_baseline.hpp"
#include "perf_common.hpp"
#if defined(FC_GPU_PROCESS)
#include <mpi.h>

#include <random>

#include "perf_ompi.hpp"
#if defined(FC_PERF_NCCL)
#include <nccl.h>
#endif
#if defined(FC_GPU_CUDA) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support
#endif
#endif

namespace perf {
namespace {

using fc::gpu::DeviceBuffer;

constexpr int kFoldThreads = 256;

/// A BaselineFold (perf_baseline.hpp) on the device: `dst` is its first destination's entry of
/// the receive-buffer table.
__global__ void fold_kernel(const float* const* send, std::int64_t src_off, float* const* dst,
                            int ndst, std::int64_t n, int P, int op) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = fold_element(send, src_off + i, P, op);
    for (int d = 0; d < ndst; ++d) dst[d][i] = v;
  }
}

int fold_blocks(std::int64_t n) {
  return static_cast<int>(
      std::clamp<std::int64_t>((n + kFoldThreads - 1) / kFoldThreads, 1, 65535));
}

/// A case's buffers on the device, and device arrays of their addresses (for the fold kernel).
struct DeviceCase {
  std::vector<DeviceBuffer> send, recv;
  std::vector<const float*> send_at;
  std::vector<float*> recv_at;
  DeviceBuffer send_table, recv_table;

  explicit DeviceCase(const CollectiveCase& c) {
    for (std::size_t r = 0; r < c.send.size(); ++r) {
      send.emplace_back(c.send[r].size() * sizeof(float));
      recv.emplace_back(c.recv[r].size() * sizeof(float));
      send_at.push_back(send.back().as<const float>());
      recv_at.push_back(recv.back().as<float>());
    }
    // The receive buffers too: poisoned ones stay poisoned.
    for (std::size_t r = 0; r < c.send.size(); ++r) {
      FC_CHECK_GPU(
          gpuMemcpy(send[r].get(), c.send[r].data(), send[r].bytes(), gpuMemcpyHostToDevice));
      FC_CHECK_GPU(
          gpuMemcpy(recv[r].get(), c.recv[r].data(), recv[r].bytes(), gpuMemcpyHostToDevice));
    }
    send_table = DeviceBuffer(send_at.size() * sizeof(const float*));
    recv_table = DeviceBuffer(recv_at.size() * sizeof(float*));
    FC_CHECK_GPU(
        gpuMemcpy(send_table.get(), send_at.data(), send_table.bytes(), gpuMemcpyHostToDevice));
    FC_CHECK_GPU(
        gpuMemcpy(recv_table.get(), recv_at.data(), recv_table.bytes(), gpuMemcpyHostToDevice));
  }
  /// The device receive buffers to the host's.
  void download(CollectiveCase& c) const {
    for (std::size_t r = 0; r < c.recv.size(); ++r)
      FC_CHECK_GPU(
          gpuMemcpy(c.recv[r].data(), recv[r].get(), recv[r].bytes(), gpuMemcpyDeviceToHost));
  }
};

/// Enqueues the baseline on the default stream: a copy engine's memcpy per copy, a kernel per
/// fold.
void enqueue_baseline(const Options& o, const Baseline& b, const DeviceCase& d) {
  const int P = static_cast<int>(d.send_at.size());
  const auto* sends = d.send_table.as<const float* const>();
  auto* const* recvs = d.recv_table.as<float* const>();
  for (const BaselineCopy& k : b.copies)
    if (k.count > 0)
      FC_CHECK_GPU(gpuMemcpyAsync(
          d.recv_at[k.dst_rank] + k.dst_off, d.send_at[k.src_rank] + k.src_off,
          static_cast<std::size_t>(k.count) * sizeof(float), gpuMemcpyDeviceToDevice, nullptr));
  for (const BaselineFold& f : b.folds)
    if (f.n > 0)
      fold_kernel<<<fold_blocks(f.n), kFoldThreads>>>(
          sends, f.src_off, recvs + f.dst_first, f.dst_count, f.n, P, static_cast<int>(o.redop));
  FC_CHECK_GPU(gpuGetLastError());
}

std::string baseline_name(const Options& o) {
  if (o.op == "allreduce" || o.op == "reducescatter")
    return "fold kernel (every rank's buffer read in rank order, one pass)";
  return "device-to-device memcpy per block (copy engines)";
}

/// Median device seconds of the baseline over -n calls after -w warm-up calls.
double time_baseline(const Options& o, const Baseline& b, const DeviceCase& d) {
  gpuEvent_t e0, e1;
  FC_CHECK_GPU(gpuEventCreate(&e0));
  FC_CHECK_GPU(gpuEventCreate(&e1));
  std::vector<double> s;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    FC_CHECK_GPU(gpuEventRecord(e0, nullptr));
    enqueue_baseline(o, b, d);
    FC_CHECK_GPU(gpuEventRecord(e1, nullptr));
    FC_CHECK_GPU(gpuEventSynchronize(e1));
    float ms = 0;
    FC_CHECK_GPU(gpuEventElapsedTime(&ms, e0, e1));
    if (i >= o.warmup) s.push_back(ms * 1e-3);
  }
  (void)gpuEventDestroy(e0);
  (void)gpuEventDestroy(e1);
  return median(s);
}

/// fusedcoll's collective over every rank's arguments (host buffers).
void call_world(fc::gpu::World& world, const std::vector<AnyArgs>& all) {
  std::visit(
      [&](const auto& first) {
        using T = std::decay_t<decltype(first)>;
        std::vector<T> v;
        for (const AnyArgs& a : all) v.push_back(std::get<T>(a));
        if constexpr (std::is_same_v<T, fc::AllReduceArgs>)
          world.all_reduce(v);
        else if constexpr (std::is_same_v<T, fc::ReduceScatterArgs>)
          world.reduce_scatter(v);
        else if constexpr (std::is_same_v<T, fc::AllGatherArgs>)
          world.all_gather(v);
        else if constexpr (std::is_same_v<T, fc::AllToAllvArgs>)
          world.all_to_allv(v);
        else
          world.broadcast(v);
      },
      all.front());
}

std::vector<AnyArgs> host_args(CollectiveCase& c) {
  std::vector<const float*> send;
  std::vector<float*> recv;
  for (auto& v : c.send) send.push_back(v.data());
  for (auto& v : c.recv) recv.push_back(v.data());
  return c.args_at(send, recv);
}

std::int64_t run_collectives(const Options& o, fc::gpu::World& world, Printer& out) {
  const int P = world.size();
  return collective_sweep(o, P, out, true, [&](CollectiveCase& c, Row& row) {
    const auto all = host_args(c);
    std::vector<double> s;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      call_world(world, all);
      if (i >= o.warmup) s.push_back(world.last_kernel_ms() * 1e-3);
    }
    row.seconds = median(s);
    {
      const DeviceCase d(c);
      row.base_seconds = time_baseline(o, baseline_plan(o, c, P), d);
    }
    if (o.check) {
      row.err = check_collective(c, o, [&] { call_world(world, all); });
      // The baseline on integer inputs, on the device.
      row.base_wrong = check_baseline(c, o, P, [&](CollectiveCase& ints) {
                         const DeviceCase d(ints);  // its receive buffers poisoned
                         enqueue_baseline(o, baseline_plan(o, ints, P), d);
                         FC_CHECK_GPU(gpuDeviceSynchronize());
                         d.download(ints);
                       }).wrong;
    }
  });
}

#if defined(FC_GPU_PROCESS)
/// AllReduce / ReduceScatter avg on a device baseline: the sum divided by P afterwards, as
/// fc::detail::finish_average does on the host.
__global__ void divide_kernel(float* p, std::int64_t n, float divisor) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    p[i] = p[i] / divisor;
}

// Why the baseline is not on device buffers: Open MPI says whether it is CUDA-aware only.
#if defined(FC_GPU_HIP)
constexpr const char* kNotDeviceAware = ", GPU-aware MPI not queried on HIP";
#else
constexpr const char* kNotDeviceAware = ", MPI not CUDA-aware";
#endif

/// Process mode's baseline (see the file comment). Every rank picks the same one: the ranks agree
/// over MPI on each condition.
class ProcessBaseline {
 public:
  enum class Kind { nccl, mpi_device, mpi_host };

  ProcessBaseline(int me, int P) : me_(me), P_(P) {
#if defined(FC_PERF_NCCL)
    if (!own_devices()) {
      why_ = "ranks share a GPU, which NCCL refuses";
    } else {
      ncclUniqueId id{};
      if (me == 0) check_nccl(ncclGetUniqueId(&id));
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      const ncclResult_t r = ncclCommInitRank(&nccl_, P, id, me);
      int ok = r == ncclSuccess ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (ok == 1) {
        kind_ = Kind::nccl;
      } else {
        if (r == ncclSuccess) ncclCommDestroy(nccl_);
        nccl_ = nullptr;
        why_ = std::string("NCCL's init failed: ") + ncclGetErrorString(r);
      }
    }
#elif defined(FC_GPU_HIP)
    why_ = "no RCCL baseline in this build";
#else
    why_ = "no NCCL in this build";
#endif
    if (kind_ != Kind::nccl) {
      int aware = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
      aware = MPIX_Query_cuda_support();
#endif
      MPI_Allreduce(MPI_IN_PLACE, &aware, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (aware == 1)
        kind_ = Kind::mpi_device;
      else
        why_ += kNotDeviceAware;
    }
    if (kind_ != Kind::mpi_host) FC_CHECK_GPU(gpuStreamCreate(&stream_));
  }
  ~ProcessBaseline() {
#if defined(FC_PERF_NCCL)
    if (nccl_ != nullptr) ncclCommDestroy(nccl_);
#endif
    if (stream_ != nullptr) (void)gpuStreamDestroy(stream_);
  }
  ProcessBaseline(const ProcessBaseline&) = delete;
  ProcessBaseline& operator=(const ProcessBaseline&) = delete;

  /// The baseline as the table's header states it.
  std::string name(const Options& o) const {
    if (kind_ == Kind::nccl) return nccl_name(o) + " on device buffers";
    if (kind_ == Kind::mpi_device) return ompi_baseline_name(o) + " on device buffers (CUDA-aware)";
    return ompi_baseline_name(o) + " on the host buffers (" + why_ + ")";
  }

  /// The baseline's call on rank me's buffers of `c`, complete when it returns. A device baseline
  /// works on device copies of them (uploaded here, untimed; the previous case's are freed).
  std::function<void()> bind(const Options& o, CollectiveCase& c) {
    if (kind_ == Kind::mpi_host) return ompi_call(o, c, me_, P_);
    send_ = DeviceBuffer(c.send[me_].size() * sizeof(float));
    recv_ = DeviceBuffer(c.recv[me_].size() * sizeof(float));
    FC_CHECK_GPU(gpuMemcpy(send_.get(), c.send[me_].data(), send_.bytes(), gpuMemcpyHostToDevice));
    FC_CHECK_GPU(gpuMemcpy(recv_.get(), c.recv[me_].data(), recv_.bytes(), gpuMemcpyHostToDevice));
    const float* s = send_.as<const float>();
    float* r = recv_.as<float>();
    std::function<void()> call;
#if defined(FC_PERF_NCCL)
    if (kind_ == Kind::nccl) call = nccl_call(o, c, s, r);
#endif
    if (!call) call = mpi_collective(o, c, s, r);
    // What ompi_call does around MPI's call on host buffers, here on the device.
    const bool avg =
        o.redop == fc::ReduceOp::avg && (o.op == "allreduce" || o.op == "reducescatter");
    const bool copy_root = o.op == "broadcast" && me_ == o.root;
    const std::int64_t n = ompi_recv_count(o, c);
    const float divisor = static_cast<float>(P_);
    gpuStream_t st = stream_;
    return [=] {
      if (copy_root)
        FC_CHECK_GPU(
            gpuMemcpy(r, s, static_cast<std::size_t>(n) * sizeof(float), gpuMemcpyDeviceToDevice));
      call();
      if (avg && n > 0) {
        divide_kernel<<<fold_blocks(n), kFoldThreads, 0, st>>>(r, n, divisor);
        FC_CHECK_GPU(gpuGetLastError());
      }
      FC_CHECK_GPU(gpuStreamSynchronize(st));
    };
  }

  /// The baseline on `c`'s host buffers of rank me, its output in c.recv[me] (the check).
  void run_into(const Options& o, CollectiveCase& c) {
    bind(o, c)();
    if (kind_ != Kind::mpi_host)
      FC_CHECK_GPU(
          gpuMemcpy(c.recv[me_].data(), recv_.get(), recv_.bytes(), gpuMemcpyDeviceToHost));
  }

 private:
#if defined(FC_PERF_NCCL)
  static void check_nccl(ncclResult_t r) {
    if (r != ncclSuccess)
      throw fc::InternalError(
          fc::detail::make_string("fusedcoll-perf: NCCL: ", ncclGetErrorString(r)));
  }

  /// Whether no two ranks of a host share a device (NCCL's condition): each rank's host name and
  /// its device's PCI bus id, gathered.
  static bool own_devices() {
    int dev = 0;
    FC_CHECK_GPU(cudaGetDevice(&dev));
    constexpr int kLen = MPI_MAX_PROCESSOR_NAME + 64;
    char mine[kLen] = {};
    int len = 0;
    MPI_Get_processor_name(mine, &len);
    mine[len] = '/';
    FC_CHECK_GPU(cudaDeviceGetPCIBusId(mine + len + 1, 63, dev));
    int P = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    std::vector<char> all(static_cast<std::size_t>(P) * kLen);
    MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> ids;
    for (int r = 0; r < P; ++r) ids.emplace_back(all.data() + static_cast<std::size_t>(r) * kLen);
    std::sort(ids.begin(), ids.end());
    return std::adjacent_find(ids.begin(), ids.end()) == ids.end();
  }

  std::function<void()> nccl_call(const Options& o, const CollectiveCase& c, const float* s,
                                  float* r) const {
    ncclComm_t comm = nccl_;
    cudaStream_t st = stream_;
    const ncclRedOp_t op = o.redop == fc::ReduceOp::min   ? ncclMin
                           : o.redop == fc::ReduceOp::max ? ncclMax
                                                          : ncclSum;  // avg: the sum, then / P
    if (o.op == "allreduce") {
      const auto n = static_cast<std::size_t>(c.count);
      return [=] { check_nccl(ncclAllReduce(s, r, n, ncclFloat, op, comm, st)); };
    }
    if (o.op == "reducescatter") {
      const auto n = static_cast<std::size_t>(c.pieces[0]);
      return [=] { check_nccl(ncclReduceScatter(s, r, n, ncclFloat, op, comm, st)); };
    }
    if (o.op == "allgather") {
      const auto n = static_cast<std::size_t>(c.pieces[0]);
      return [=] { check_nccl(ncclAllGather(s, r, n, ncclFloat, comm, st)); };
    }
    if (o.op == "alltoall") {
      const auto n = static_cast<std::size_t>(c.per_peer);
      const int P = P_;
      return [=] {
        check_nccl(ncclGroupStart());
        for (int q = 0; q < P; ++q) {
          check_nccl(ncclSend(s + static_cast<std::size_t>(q) * n, n, ncclFloat, q, comm, st));
          check_nccl(ncclRecv(r + static_cast<std::size_t>(q) * n, n, ncclFloat, q, comm, st));
        }
        check_nccl(ncclGroupEnd());
      };
    }
    const auto n = static_cast<std::size_t>(c.count);
    const int root = o.root;
    return [=] { check_nccl(ncclBroadcast(r, r, n, ncclFloat, root, comm, st)); };
  }
  ncclComm_t nccl_ = nullptr;
#endif

  static std::string nccl_name(const Options& o) {
    const std::string avg = o.redop == fc::ReduceOp::avg ? " (sum, then / P)" : "";
    if (o.op == "allreduce") return "ncclAllReduce" + avg;
    if (o.op == "reducescatter") return "ncclReduceScatter" + avg;
    if (o.op == "allgather") return "ncclAllGather";
    if (o.op == "alltoall") return "ncclSend / ncclRecv to every peer";
    return "ncclBroadcast (the root copies send to recv first)";
  }

  int me_, P_;
  Kind kind_ = Kind::mpi_host;
  std::string why_;
  gpuStream_t stream_ = nullptr;
  DeviceBuffer send_, recv_;
};

/// What process mode's unfused form of fused operator `op` is (the baseline of its rows).
std::string unfused_baseline(const std::string& op) {
  if (op == "gemv")
    return "unfused = each rank's GEMV partial, then process mode's AllReduce (direct) over it";
  return std::string("unfused = each rank's ") + (op == "embedding" ? "pooling" : "expert GEMMs") +
         " into its stage, then process mode's pushed All-to-All of the stage";
}

/// Process mode (see the file comment): this process is one rank of the world.
int run_process(const Options& given) {
  fc::gpu::WorldOptions wo;
  wo.placement = fc::gpu::Placement::process;
  wo.timeout_s = 60;
  fc::gpu::World world(wo);  // initialises MPI unless the program did
  const int P = world.size(), me = world.rank();
  Options o = given;
  if (!fit_world(o, P, me)) return 2;  // the same on every rank: every rank leaves alike
  const char* routes = fc::env().gpu_proxy == fc::Env::GpuProxy::all
                           ? "every peer through the host proxy"
                           : "same-node peers through IPC";
  const std::string setup = fc::detail::make_string(
      "process mode, one rank per process on ", world.device_name(), " (", routes,
      "); wall time of whole calls (", mpi_library_version(), ")");
  if (is_fused(o.op)) {
    // The fused operators: unfused (the compute, then process mode's own collective: the
    // pushed All-to-All of the stage, or for GemvAllReduce the direct AllReduce of the partials)
    // against scale_up and scale_out, as --backend mpi runs them. NCCL and Open MPI are not the
    // baseline here: the unfused form is the same kernels as the fused ones, unfused.
    Printer out(o, P, setup + "; " + unfused_baseline(o.op), "");
    if (me == 0) out.header();
    std::int64_t wrong = 0;
    world.run([&](fc::Communicator& comm) {
      wrong = fused_world(o, comm, out, [&](FusedCase& c) {
        std::vector<float>& mine = *c.outputs()[static_cast<std::size_t>(me)];
        return FusedRun{[&c, &comm](fc::Mode m) { c.call(comm, m); }, mine.data(), mine.size()};
      });
    });
    return finish_world(out, wrong, me);
  }
  ProcessBaseline baseline(me, P);
  Printer out(o, P, setup, baseline.name(o));
  if (me == 0) out.header();
  std::int64_t wrong = 0;
  world.run([&](fc::Communicator& comm) {
    std::mt19937 rng(12345);
    wrong = collective_sweep(o, P, out, me == 0, [&](CollectiveCase& c, Row& row) {
      const auto times = time_interleaved({[&] { c.call(comm); }, baseline.bind(o, c)}, o, rng);
      row.seconds = times[0];
      row.base_seconds = times[1];
      if (o.check) {
        row.err = reduce_errors(check_collective(c, o, [&] { c.call(comm); }, me));
        row.base_wrong = sum_over_ranks(
            check_baseline(c, o, P, [&](CollectiveCase& ints) { baseline.run_into(o, ints); }, me)
                .wrong);
      }
    });
  });
  return finish_world(out, wrong, me);
}
#endif

}  // namespace

int run_gpu(const Options& o) {
  if (!fc::gpu::available()) {
    std::fprintf(stderr, "fusedcoll-perf --backend gpu: no GPU is visible (%s build)\n",
                 fc::gpu::vendor());
    return kNoDevice;
  }
  if (fc::env().gpu_mode == fc::Env::GpuMode::process) {
#if defined(FC_GPU_PROCESS)
    return run_process(o);
#else
    usage_error("--backend gpu with FUSEDCOLL_GPU_MODE=process: this build has no process mode "
                "(configure where MPI is found: FUSEDCOLL_GPU_PROCESS)");
#endif
  }
  fc::gpu::World world({.world_size = o.ranks, .device = 0, .timeout_s = 60});
  const std::string setup = "one " + world.device_name() + " shared by the ranks";
  Printer out(o, o.ranks, setup, baseline_name(o));
  out.header();
  const std::int64_t wrong = run_collectives(o, world, out);
  out.footer();
  if (wrong > 0) {
    std::fprintf(stderr, "fusedcoll-perf: %lld elements differ from ref/\n",
                 static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace perf
