// The World: its state's construction from the options (devices, ranks, links, watchdog) and
// teardown, World::run (SPMD host threads, failure propagation) and the emulator's Backend.

#include <oneapi/tbb/global_control.h>

#include <exception>
#include <string>
#include <thread>

#include "emu/link.hpp"
#include "emu/ops.hpp"
#include "emu/state.hpp"
#include "emu/vtime.hpp"
#include "fusedcoll/detail/spmd.hpp"
#include "fusedcoll/env.hpp"

namespace fusedcoll::emu {

// ----------------------------------------------------------------------------------------------
// World::State

World::State::State(const WorldOptions& o) : options(o) {
  enforce_env();
  FC_ENFORCE(o.world_size >= 1 && o.world_size <= 64, "emu world_size ", o.world_size,
             " is outside [1, 64]");
  FC_ENFORCE(o.device.compute_units >= 1 && o.device.compute_units <= 64, "compute_units ",
             o.device.compute_units, " is outside [1, 64]");
  FC_ENFORCE(o.device.max_resident_wgs >= 0, "max_resident_wgs is negative");
  size = o.world_size;
  compute_units = o.device.compute_units;
  max_resident = o.device.max_resident_wgs > 0 ? o.device.max_resident_wgs : 4 * compute_units;
  const bool virtual_clock = o.clock == ClockKind::virtual_time ||
                             (o.clock == ClockKind::from_env && env().virtual_clock);
  std::unique_ptr<model::Preset> preset;
  if (virtual_clock) {
    if (o.model) {
      preset = std::make_unique<model::Preset>(*o.model);
      model::validate(*preset);
    } else {
      const std::string name = !o.preset.empty()        ? o.preset
                               : !env().preset.empty() ? env().preset
                                                       : std::string("host");
      preset = std::make_unique<model::Preset>(model::load_preset(name));
    }
    if (o.device.max_resident_wgs == 0)
      max_resident = preset->device.resident_wgs_per_cu * preset->device.compute_units;
  }
  timeout_s = o.timeout_s > 0 ? o.timeout_s : env().timeout_s;
  fuzz_seed = o.fuzz_seed != 0 ? o.fuzz_seed : env().fuzz_seed;
  check_protocol = o.check_protocol || env().check_protocol;
  FC_ENFORCE(o.link_gbps >= 0 && o.link_gbps <= 1e6, "link_gbps ", o.link_gbps,
             " is outside [0, 1e6]");
  FC_ENFORCE(o.link_latency_us >= 0 && o.link_latency_us <= 1e6, "link_latency_us ",
             o.link_latency_us, " is outside [0, 1e6]");
  link_gbps = o.link_gbps > 0 ? o.link_gbps : env().link_gbps;
  link_latency_us = o.link_latency_us > 0 ? o.link_latency_us : env().link_latency_us;
  if (virtual_clock) link_gbps = link_latency_us = 0;  // the preset's links model them
  trace_path = !o.trace_path.empty() ? o.trace_path : env().trace_path;
  tracing = !trace_path.empty();
  origin = std::chrono::steady_clock::now();
  // Every device gets its compute units as real threads (they idle when nothing is runnable).
  parallelism =
      std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                            static_cast<std::size_t>(size * compute_units + 1));
  for (int r = 0; r < size; ++r) devices.push_back(std::make_unique<impl::Device>(this, r));
  activity.assign(size, "not started");
  rendezvous_seq.assign(size, 0);
  allocs_done.assign(size, 0);
  slot_keys.resize(size);
  next_slot.assign(size, 0);
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<Rank>(*this, r));
  impl::start_links(*this);
  if (preset) vt = std::make_unique<impl::VirtualTime>(*this, std::move(*preset));
  watchdog = std::thread([this] { watch(); });
}

World::State::~State() {
  {
    std::lock_guard lock(watch_mu);
    stopping = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  impl::stop_links(*this);
  vt.reset();
  for (auto& d : devices) d->arena.terminate();
  if (tracing) write_trace();
}

Rank::Rank(World::State& world, int rank) : world_(world), rank_(rank) {
  expected_.assign(kSlotsPerDevice, 0);
}

int Rank::size() const noexcept { return world_.size; }
int Rank::compute_units() const noexcept { return world_.compute_units; }
int Rank::max_resident_wgs() const noexcept { return world_.max_resident; }
bool Rank::virtual_time() const noexcept { return world_.vt != nullptr; }

World::World(WorldOptions options) : state_(std::make_unique<State>(options)) {}
World::~World() = default;
int World::size() const noexcept { return state_->size; }
const WorldOptions& World::options() const noexcept { return state_->options; }
bool World::virtual_time() const noexcept { return state_->vt != nullptr; }

const model::Preset& World::preset() const {
  FC_ENFORCE(state_->vt, "preset(): this World runs on the wall clock, not in virtual time");
  return state_->vt->preset;
}

double World::virtual_seconds(int rank) const {
  FC_ENFORCE(state_->vt, "virtual_seconds(): this World runs on the wall clock, not in virtual time");
  FC_ENFORCE(rank >= 0 && rank < state_->size, "virtual_seconds of rank ", rank,
             " in a world of ", state_->size);
  return state_->vt->now(rank);
}

const char* to_string(ClockKind c) noexcept {
  switch (c) {
    case ClockKind::from_env:
      return "from_env";
    case ClockKind::wall:
      return "wall";
    case ClockKind::virtual_time:
      return "virtual";
  }
  return "?";
}

std::uint64_t World::bytes_sent(int rank) const {
  FC_ENFORCE(rank >= 0 && rank < state_->size, "bytes_sent of rank ", rank, " in a world of ",
             state_->size);
  return state_->devices[rank]->bytes_sent.load(std::memory_order_relaxed);
}

// ----------------------------------------------------------------------------------------------
// Failures crossing threads

std::exception_ptr impl::clone_error(std::exception_ptr e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return fusedcoll::detail::make_error(err.code(), prefix + err.what(),
                                         fusedcoll::detail::is_secondary(err));
  } catch (const std::exception& err) {
    return std::make_exception_ptr(std::runtime_error(prefix + err.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(prefix + "unknown exception"));
  }
}

// ----------------------------------------------------------------------------------------------
// World::run and the Backend

namespace {

class EmuBackend final : public Backend {
 public:
  EmuBackend(World::State& world, Rank& rk) : rk_(rk), kernels_(make_kernel_runtime(world, rk)) {}
  int rank() const noexcept override { return rk_.rank(); }
  int size() const noexcept override { return rk_.size(); }
  void barrier() override { rk_.barrier("user barrier"); }
  void embedding_alltoall(const EmbeddingAllToAllArgs& a, Mode m) override {
    ops::embedding_alltoall(rk_, a, m);
  }
  void gemv_allreduce(const GemvAllReduceArgs& a, Mode m) override {
    ops::gemv_allreduce(rk_, a, m);
  }
  void gemm_alltoall(const GemmAllToAllArgs& a, Mode m) override { ops::gemm_alltoall(rk_, a, m); }
  void all_reduce(const AllReduceArgs& a) override { ops::all_reduce(rk_, a); }
  void all_to_allv(const AllToAllvArgs& a) override { ops::all_to_allv(rk_, a); }
  void reduce_scatter(const ReduceScatterArgs& a) override { ops::reduce_scatter(rk_, a); }
  void all_gather(const AllGatherArgs& a) override { ops::all_gather(rk_, a); }
  void broadcast(const BroadcastArgs& a) override { ops::broadcast(rk_, a); }
  fusedcoll::detail::KernelRuntime* kernels() noexcept override { return kernels_.get(); }

 private:
  Rank& rk_;
  std::unique_ptr<fusedcoll::detail::KernelRuntime> kernels_;
};

}  // namespace

void World::run(const std::function<void(Communicator&)>& per_rank) {
  State& s = *state_;
  FC_ENFORCE(!s.broken, "this World was aborted by an earlier failure; create a new World");
  if (s.backends.empty())
    for (auto& r : s.ranks) s.backends.push_back(std::make_shared<EmuBackend>(s, *r));

  // A rank that fails aborts the world, so that no peer waits for it; the peers' errors from the
  // abort are secondary (World::State::throw_abort), a timeout's are not (all ranks report it).
  // Virtual time: every host thread counts as running from here until it returns, so that the
  // driver starts no workgroup before every rank had its chance to launch (emu/vtime.hpp).
  if (s.vt) s.vt->begin_run();
  struct Blocked {  // at the thread's end, however it ends
    World::State& s;
    int r;
    ~Blocked() {
      if (!s.vt) return;
      std::lock_guard lock(s.vt->mu);
      s.vt->block(r);
    }
  };
  const auto root = fusedcoll::detail::run_spmd(
      s.size,
      [&](int r) {
        const Blocked at_end{s, r};
        Communicator comm(s.backends[r]);
        s.ranks[r]->set_activity("running user code");
        per_rank(comm);
        s.ranks[r]->set_activity("returned from user code");
      },
      [&](int r, std::exception_ptr error) {
        s.ranks[r]->set_activity("failed");
        s.abort_from(error, "rank " + std::to_string(r));
      });
  if (!root) return;
  s.broken = true;
  std::rethrow_exception(
      impl::clone_error(root->error, "rank " + std::to_string(root->rank) + ": "));
}

}  // namespace fusedcoll::emu
