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

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fusedcoll/gpu.hpp"
#include "fusedcoll/inputs.hpp"
#include "gpu/runtime.hpp"
#include "perf_baseline.hpp"
#include "perf_common.hpp"

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

}  // namespace

int run_gpu(const Options& o) {
  if (!fc::gpu::available()) {
    std::fprintf(stderr, "fusedcoll-perf --backend gpu: no GPU is visible (%s build)\n",
                 fc::gpu::vendor());
    return kNoDevice;
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
