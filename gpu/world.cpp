// gpu::World: the single-GPU multi-rank mode. One Context (stream, slots, timeout record) for the
// P virtual ranks; SPMD `run` turns every op call into a rendezvous whose last arriving rank
// launches the kernels for all ranks at once. One launch per kernel for every rank is what
// guarantees that all ranks' blocks are resident together (sized by occupancy), which fused
// kernels whose blocks wait for other ranks' blocks need; P launches on P streams would give no
// such guarantee.
//
// Process mode (one rank per MPI process, docs/gpu.md "Process mode") runs the same kernels: a
// rank's launch takes the peers' IPC-mapped (or shadowed, for the proxy) addresses in `ranks[]`
// and its own rank in place of blockIdx.y, and signals at system scope; its Context holds a
// gpu/process.hpp Process, and each call meets its peers in agree_world instead of the rendezvous.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "fusedcoll/detail/spmd.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/gpu.hpp"
#include "gpu/collectives.hpp"
#include "gpu/kernels.hpp"
#include "gpu/ops.hpp"
#if defined(FC_GPU_PROCESS)
#include <mpi.h>

#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu {
namespace {

[[noreturn]] void throw_as(ErrorCode code, const std::string& what) {
  std::rethrow_exception(make_error(code, what));
}

/// An error as a value, so that every rank can throw its own copy (rethrowing one exception
/// object from several threads would share it).
struct Failure {
  ErrorCode code = ErrorCode::ok;
  std::string what;
};

/// What a rank's call throws when another rank failed first: secondary (detail/spmd.hpp), so
/// `run` reports the root cause instead.
[[noreturn]] void throw_abandoned(const std::string& name) {
  throw detail::SecondaryError<InternalError>("fusedcoll gpu: " + name +
                                              " abandoned: another rank failed");
}

Failure capture() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::exception& e) {
    return {ErrorCode::internal, e.what()};
  } catch (...) {
    return {ErrorCode::internal, "unknown exception"};
  }
}

}  // namespace

bool available() noexcept {
  int count = 0;
  return gpuGetDeviceCount(&count) == gpuSuccess && count > 0;
}

const char* vendor() noexcept { return FC_GPU_VENDOR; }

namespace {

bool process_placement(const WorldOptions& o) {
  if (o.placement == Placement::from_environment) return env().gpu_mode == Env::GpuMode::process;
  return o.placement == Placement::process;
}

double timeout_of(const WorldOptions& o) { return o.timeout_s > 0 ? o.timeout_s : env().timeout_s; }

#if defined(FC_GPU_PROCESS)
/// MPI for process mode: initialised here unless the program did (then finalised by ~World).
struct MpiSession {
  bool owned = false;
  MpiSession() {
    int init = 0;
    MPI_Initialized(&init);
    int provided = 0;
    if (!init) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      owned = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE)
      throw BackendError(
          "fusedcoll gpu: process mode needs MPI_THREAD_MULTIPLE (its proxy thread calls MPI)");
  }
  ~MpiSession() {
    int done = 0;
    MPI_Finalized(&done);
    if (owned && !done) MPI_Finalize();
  }
};

ProcessPtr make_process(const WorldOptions& o) {
  ProcessSetup setup;
  setup.comm = MPI_COMM_WORLD;
  setup.device = o.device;
  setup.timeout_s = timeout_of(o);
  setup.proxy = env().gpu_proxy;
  return ProcessPtr(new Process(setup));
}
#endif

Context make_context(const WorldOptions& o);

}  // namespace

struct World::State {
  WorldOptions options;
#if defined(FC_GPU_PROCESS)
  std::unique_ptr<MpiSession> mpi;  // before ctx: MPI outlives the Process in ctx
#endif
  Context ctx;
  // Users' kernels (gpu/kernels.hpp): buffers and signals that live as long as the World.
  std::unique_ptr<Kernels> kernels;

  // The rendezvous of `run`'s host threads.
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::string op;
  std::string mismatch;
  std::vector<const void*> args;
  Failure result;
  bool aborted = false;

  explicit State(const WorldOptions& o)
      : options(o),
#if defined(FC_GPU_PROCESS)
        mpi(process_placement(o) ? std::make_unique<MpiSession>() : nullptr),
#endif
        ctx(make_context(o)),
        args(static_cast<std::size_t>(ctx.world_size()), nullptr) {
    if (ctx.me() >= 0) {
      kernels = std::make_unique<Kernels>(ctx);
    } else {
      kernels = std::make_unique<Kernels>(
          ctx, [this](int rank, const std::string& what, const void* arg,
                      const std::function<void(const std::vector<const void*>&)>& work) {
            collective(rank, what, arg, work);
          });
    }
  }

  /// Every rank's call of `name` meets here; the last one runs `work` with all ranks' arguments.
  template <class Work>
  void collective(int rank, const std::string& name, const void* arg, Work&& work) {
    std::unique_lock lk(m);
    if (aborted) throw_abandoned(name);
    if (arrived == 0) {
      op = name;
      mismatch.clear();
    } else if (name != op && mismatch.empty()) {
      mismatch = detail::make_string("collective call does not match across ranks: rank ", rank,
                                     " called '", name, "' while others called '", op, "'");
    }
    args[static_cast<std::size_t>(rank)] = arg;
    const std::uint64_t gen = generation;
    if (++arrived == ctx.world_size()) {
      result = {};
      if (!mismatch.empty()) {
        result = {ErrorCode::invalid_argument, mismatch};
      } else {
        try {
          work(args);
        } catch (...) {
          result = capture();
        }
      }
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lk, [&] { return generation != gen || aborted; });
      if (generation == gen) throw_abandoned(name);
    }
    if (result.code != ErrorCode::ok) throw_as(result.code, result.what);
  }

  void abort() {
    std::lock_guard lk(m);
    aborted = true;
    cv.notify_all();
  }
};

namespace {

template <class Args>
std::vector<Args> gather(const std::vector<const void*>& raw) {
  std::vector<Args> all;
  for (const void* p : raw) all.push_back(*static_cast<const Args*>(p));
  return all;
}

Context make_context(const WorldOptions& o) {
  if (!process_placement(o))
    return Context(o.world_size, o.device < 0 ? 0 : o.device, timeout_of(o));
#if defined(FC_GPU_PROCESS)
  ProcessPtr p = make_process(o);
  const int size = p->size(), device = p->device();
  return Context(size, device, timeout_of(o), std::move(p));
#else
  throw UnsupportedError(
      "fusedcoll gpu: process mode (FUSEDCOLL_GPU_MODE=process) needs a build with MPI "
      "(FUSEDCOLL_GPU_PROCESS)");
#endif
}

/// Every operator and collective of a rank's Backend, each through `Derived::meet(args, name,
/// run)`: how that placement meets the other ranks' calls named `name` before `run(ctx, all)`
/// takes every rank's arguments.
template <class Derived>
class WithCalls : public Backend {
 public:
  void embedding_alltoall(const EmbeddingAllToAllArgs& args, Mode mode) override {
    op(args, mode, "embedding_alltoall", ops::embedding_alltoall);
  }
  void gemv_allreduce(const GemvAllReduceArgs& args, Mode mode) override {
    op(args, mode, "gemv_allreduce", ops::gemv_allreduce);
  }
  void gemm_alltoall(const GemmAllToAllArgs& args, Mode mode) override {
    op(args, mode, "gemm_alltoall", ops::gemm_alltoall);
  }
  void all_reduce(const AllReduceArgs& args) override {
    self().meet(args, "all_reduce", coll::all_reduce);
  }
  void all_to_allv(const AllToAllvArgs& args) override {
    self().meet(args, "all_to_allv", coll::all_to_allv);
  }
  void reduce_scatter(const ReduceScatterArgs& args) override {
    self().meet(args, "reduce_scatter", coll::reduce_scatter);
  }
  void all_gather(const AllGatherArgs& args) override {
    self().meet(args, "all_gather", coll::all_gather);
  }
  void broadcast(const BroadcastArgs& args) override {
    self().meet(args, "broadcast", coll::broadcast);
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  template <class Args>
  void op(const Args& args, Mode mode, const char* name,
          void (*run)(Context&, std::span<const Args>, Mode)) {
    self().meet(args, std::string(name) + " " + to_string(mode),
                [&](Context& ctx, std::span<const Args> all) { run(ctx, all, mode); });
  }
};

/// This process's rank in process mode: every call meets the peers' in agree_world.
class ProcessBackend final : public WithCalls<ProcessBackend> {
 public:
  ProcessBackend(Context& ctx, Kernels& kernels) : ctx_(ctx), kernels_(kernels) {}
  detail::KernelRuntime* kernels() noexcept override { return kernels_.rank(ctx_.me()); }
  int rank() const noexcept override { return ctx_.me(); }
  int size() const noexcept override { return ctx_.world_size(); }
  void barrier() override {
#if defined(FC_GPU_PROCESS)
    ctx_.process()->exchange("", "to reach the barrier");
#endif
  }

 private:
  friend class WithCalls<ProcessBackend>;
  /// A call: the peers' agreed fields (agree_world), then `run` over every rank's call.
  template <class Args, class Run>
  void meet(const Args& args, const std::string& name, Run&& run) {
#if defined(FC_GPU_PROCESS)
    const std::vector<Args> all = agree_world(*ctx_.process(), args, name);
    run(ctx_, std::span<const Args>(all));
#else
    (void)args;
    (void)name;
    (void)run;
#endif
  }
  Context& ctx_;
  Kernels& kernels_;
};

/// One rank's `Backend`: every call is a rendezvous of all ranks.
class RankBackend final : public WithCalls<RankBackend> {
 public:
  RankBackend(World::State& s, int rank) : s_(s), rank_(rank) {}
  detail::KernelRuntime* kernels() noexcept override { return s_.kernels->rank(rank_); }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return s_.ctx.world_size(); }
  void barrier() override {
    s_.collective(rank_, "barrier", nullptr, [](const std::vector<const void*>&) {});
  }

 private:
  friend class WithCalls<RankBackend>;
  /// A call: the rendezvous, then `run` over every rank's arguments.
  template <class Args, class Run>
  void meet(const Args& args, const std::string& name, Run&& run) {
    s_.collective(rank_, name, &args, [&](const std::vector<const void*>& raw) {
      const auto all = gather<Args>(raw);
      run(s_.ctx, std::span<const Args>(all));
    });
  }
  World::State& s_;
  int rank_;
};

}  // namespace

World::World(WorldOptions options) {
  enforce_env();
  state_ = std::make_unique<State>(options);
}

World::~World() = default;

int World::size() const noexcept { return state_->ctx.world_size(); }

int World::rank() const noexcept { return state_->ctx.me() < 0 ? 0 : state_->ctx.me(); }

bool World::process_mode() const noexcept { return state_->ctx.me() >= 0; }

namespace {
/// The all-ranks-at-once calls need every rank's arguments in this process.
void require_single(const Context& ctx, const char* op) {
  if (ctx.me() >= 0)
    throw InvalidArgument(detail::make_string(
        "fusedcoll gpu: ", op,
        " over all ranks' calls at once is the single-GPU mode's form; in "
        "process mode each process makes its own rank's call inside World::run"));
}
}  // namespace

std::string World::device_name() const { return state_->ctx.device_name(); }

double World::last_kernel_ms() const noexcept { return state_->ctx.last_kernel_ms(); }

void World::embedding_alltoall(std::span<const EmbeddingAllToAllArgs> ranks, Mode mode) {
  require_single(state_->ctx, "embedding_alltoall");
  ops::embedding_alltoall(state_->ctx, ranks, mode);
}

void World::gemv_allreduce(std::span<const GemvAllReduceArgs> ranks, Mode mode) {
  require_single(state_->ctx, "gemv_allreduce");
  ops::gemv_allreduce(state_->ctx, ranks, mode);
}

void World::gemm_alltoall(std::span<const GemmAllToAllArgs> ranks, Mode mode) {
  require_single(state_->ctx, "gemm_alltoall");
  ops::gemm_alltoall(state_->ctx, ranks, mode);
}

void World::all_reduce(std::span<const AllReduceArgs> ranks) {
  require_single(state_->ctx, "all_reduce");
  coll::all_reduce(state_->ctx, ranks);
}

void World::reduce_scatter(std::span<const ReduceScatterArgs> ranks) {
  require_single(state_->ctx, "reduce_scatter");
  coll::reduce_scatter(state_->ctx, ranks);
}

void World::all_gather(std::span<const AllGatherArgs> ranks) {
  require_single(state_->ctx, "all_gather");
  coll::all_gather(state_->ctx, ranks);
}

void World::all_to_allv(std::span<const AllToAllvArgs> ranks) {
  require_single(state_->ctx, "all_to_allv");
  coll::all_to_allv(state_->ctx, ranks);
}

void World::broadcast(std::span<const BroadcastArgs> ranks) {
  require_single(state_->ctx, "broadcast");
  coll::broadcast(state_->ctx, ranks);
}

void World::run(const std::function<void(Communicator&)>& per_rank) {
  State& s = *state_;
  if (s.ctx.me() >= 0) {
    Communicator comm(std::make_shared<ProcessBackend>(s.ctx, *s.kernels));
    per_rank(comm);
    return;
  }
  const int P = s.ctx.world_size();
  {
    std::lock_guard lk(s.m);
    s.aborted = false;
    s.arrived = 0;
  }
  const auto root = detail::run_spmd(
      P,
      [&](int r) {
        Communicator comm(std::make_shared<RankBackend>(s, r));
        per_rank(comm);
      },
      [&](int, std::exception_ptr) { s.abort(); });
  if (!root) return;
  Failure first;
  try {
    std::rethrow_exception(root->error);
  } catch (...) {
    first = capture();
  }
  throw_as(first.code, detail::make_string("rank ", root->rank, ": ", first.what));
}

}  // namespace fusedcoll::gpu
