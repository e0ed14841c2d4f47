#pragma once
/// @file
/// The emulator backend: P virtual GPUs in one process. Each device is a oneTBB `task_arena`
/// whose threads are its compute units; a kernel launch is a grid of workgroups (C++20
/// coroutines run as oneTBB tasks) that talk to peers through symmetric memory with put / signal
/// / wait. Results are bit-identical to `ref/`. See docs/emulator.md.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu {

/// Shape of one virtual GPU.
struct DeviceOptions {
  /// Compute units: the threads of the device's arena.
  int compute_units = 4;
  /// Workgroups that may be resident (started and not finished) at once; 0 means
  /// 4 x compute_units. A kernel whose workgroups wait for workgroups that can never become
  /// resident deadlocks, as on a GPU, and the timeout reports it.
  int max_resident_wgs = 0;
};

/// How a `World` tells time.
enum class ClockKind : std::uint8_t {
  from_env,      ///< `FUSEDCOLL_CLOCK` (default: wall).
  wall,          ///< The host's clock: kernels run in parallel on the host's cores.
  /// The cost model's virtual time (docs/simulation.md): every workgroup advances a virtual clock
  /// by the modelled cost of its compute spans, transfers and waits on the preset's machine; the
  /// results stay bit-exact, and the times depend on the preset and the plan only.
  virtual_time,
};
const char* to_string(ClockKind c) noexcept;

/// Options of a `World`. Fields left at their defaults take the `FUSEDCOLL_*` environment
/// variables (docs/configuration.md), then the built-in defaults.
struct WorldOptions {
  int world_size = 4;
  DeviceOptions device;
  /// Seconds any wait may block before the run fails with `TimeoutError`; <= 0: from
  /// `FUSEDCOLL_TIMEOUT` (default 30).
  double timeout_s = 0;
  /// Non-zero: randomise workgroup start order and inject random delays before puts and signals,
  /// reproducibly from this seed. 0: from `FUSEDCOLL_FUZZ_SEED` (default 0, off).
  std::uint64_t fuzz_seed = 0;
  /// Protocol checking: every mailbox read (`WgContext::read`) must be of bytes a put of the
  /// current call wrote and whose signal the reading workgroup has observed, and no two puts (or
  /// zero-copy stores) of one call may write the same destination bytes; a violation raises
  /// `ProtocolError`. Costs a lock per put, signal and read. false: from
  /// `FUSEDCOLL_CHECK_PROTOCOL` (default off).
  bool check_protocol = false;
  /// Link model: each device's puts and stores to peers leave through one egress link of this
  /// bandwidth (GB/s, 1e9 bytes/s), back to back, and each signal lands `link_latency_us` after
  /// everything its device sent before it, so communication costs wall time and overlaps with
  /// compute. 0 (both): from `FUSEDCOLL_LINK_GBPS` / `FUSEDCOLL_LINK_US` (default off: free,
  /// instant communication).
  double link_gbps = 0;
  double link_latency_us = 0;
  /// Wall clock or virtual time. In virtual time the preset's device and links replace
  /// `device.compute_units` (which then only sizes the host thread pool), the default residency
  /// (`resident_wgs_per_cu` x the preset's compute units; `device.max_resident_wgs` still
  /// overrides it) and the link model above (ignored).
  ClockKind clock = ClockKind::from_env;
  /// Virtual time's machine: a built-in preset's name or a preset file's path; empty: from
  /// `FUSEDCOLL_PRESET` (default `host`).
  std::string preset{};
  /// A preset built in code; when set it is used instead of `preset`.
  std::shared_ptr<const model::Preset> model{};
  /// Tracing: where the World writes its Chrome/Perfetto trace when it is destroyed
  /// (docs/emulator.md, "Debugging"); empty: from `FUSEDCOLL_TRACE` (default off).
  std::string trace_path{};
};

/// A world of `world_size` virtual GPUs. `run` executes SPMD code: one host thread per rank,
/// each given its rank's `Communicator`.
class World {
 public:
  explicit World(WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  /// Runs `per_rank` on every rank concurrently and returns when all are done. If any rank
  /// throws, the other ranks' pending waits are aborted (nothing hangs), and the root cause is
  /// rethrown: the first non-timeout error if there is one, else the first timeout, its message
  /// prefixed with the rank.
  void run(const std::function<void(Communicator&)>& per_rank);

  int size() const noexcept;
  const WorldOptions& options() const noexcept;
  /// Bytes `rank`'s device has put or stored into other devices' memory since the world was
  /// created: what crossed its link (the wire bytes of benchmarks).
  std::uint64_t bytes_sent(int rank) const;

  /// True when the world runs in virtual time.
  bool virtual_time() const noexcept;
  /// The machine virtual time models; throws `InvalidArgument` on the wall clock.
  const model::Preset& preset() const;
  /// Virtual time: `rank`'s host clock in seconds (where its last kernel, barrier or collective
  /// left it). Between `run`s, or on `rank`'s own thread inside one; after a barrier every rank
  /// reads the same value, so the time of an op is its reading after a barrier minus the one
  /// before. Throws `InvalidArgument` on the wall clock.
  double virtual_seconds(int rank) const;

  /// The implementation (emu/runtime.hpp); for tests and kernel authors.
  struct State;
  State& state() noexcept { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace fusedcoll::emu
