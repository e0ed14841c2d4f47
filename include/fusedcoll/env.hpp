#pragma once
/// @file
/// The runtime knobs: every `FUSEDCOLL_*` environment variable fusedcoll reads is a field here,
/// read once per process, and listed in docs/configuration.md. No other file calls `getenv`.

#include <string>
#include <vector>

namespace fusedcoll {

/// The parsed environment.
struct Env {
  /// Highest instruction set the shared tile kernels may use.
  enum class KernelIsa { automatic, base, avx2, avx512 };

  /// `FUSEDCOLL_KERNEL_ISA` = `auto` (default) | `base` (SSE2) | `avx2` | `avx512`: caps the
  /// instruction set the tile kernels pick at run time. Results are bit-identical for every value;
  /// the knob exists so that tests can prove it on a machine that has the wider sets.
  KernelIsa kernel_isa = KernelIsa::automatic;

  /// `FUSEDCOLL_TIMEOUT` = seconds (default 30): how long any emulator wait may block before the
  /// run fails with `TimeoutError` naming who waited for what.
  double timeout_s = 30.0;

  /// `FUSEDCOLL_FUZZ_SEED` = integer (default 0 = off): the emulator's schedule fuzzing seed
  /// (random workgroup order, random delays before puts and signals).
  unsigned long long fuzz_seed = 0;

  /// `FUSEDCOLL_TRACE` = path (default empty = off): the emulator writes a Chrome/Perfetto trace
  /// of every kernel (one track per device compute unit) to this file when a `World` ends.
  std::string trace_path;

  /// `FUSEDCOLL_CHECK_PROTOCOL` = `0` (default) | `1`: the emulator checks every mailbox read and
  /// put against the signal protocol and raises `ProtocolError` on a violation (docs/emulator.md).
  bool check_protocol = false;

  /// `FUSEDCOLL_LINK_GBPS` = GB/s (default 0 = unlimited) and `FUSEDCOLL_LINK_US` = microseconds
  /// (default 0): the emulator's link model (docs/emulator.md, "Link model").
  double link_gbps = 0;
  double link_latency_us = 0;

  /// `FUSEDCOLL_CLOCK` = `wall` (default) | `virtual`: the emulator's time. `virtual` runs it in
  /// the cost model's virtual time (docs/simulation.md, "Virtual time").
  bool virtual_clock = false;

  /// `FUSEDCOLL_PRESET` = a built-in preset's name (`host`, `mi250x`, `h100`) or a preset file's
  /// path (default empty: `host`): the machine virtual time models (docs/simulation.md).
  std::string preset;

  /// How the MPI backend moves data between ranks (docs/mpi.md, "Transports").
  enum class MpiTransport { automatic, rma, p2p };
  /// `FUSEDCOLL_MPI_TRANSPORT` = `auto` (default) | `rma` | `p2p`: one-sided RMA in one window,
  /// or two-sided messages; `auto` takes RMA when every rank shares memory with every other
  /// (one host), p2p otherwise. `mpi::Options::transport` overrides it.
  MpiTransport mpi_transport = MpiTransport::automatic;

  /// Whether the MPI backend's collectives follow the host structure (docs/mpi.md, "Across
  /// hosts").
  enum class MpiHierarchy { automatic, off, on };
  /// `FUSEDCOLL_MPI_HIERARCHY` = `auto` (default) | `off` | `on`: `on` runs the direct AllReduce
  /// as a chain of host segments (and relays the compressed AllReduce's results once per host);
  /// `auto` does so when that moves less over the busiest host link than the flat schedule.
  /// Results are the same bits either way.
  MpiHierarchy mpi_hierarchy = MpiHierarchy::automatic;

  /// `FUSEDCOLL_MPI_HOSTS` = comma-separated host numbers (default empty: the hosts that
  /// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) finds): rank r is taken to be on host
  /// `list[r mod length]`, for the collectives' schedules only (the transport still follows real
  /// shared memory). Lets one machine run the multi-host schedules, e.g. in tests.
  std::vector<int> mpi_hosts;

  /// How the GPU backend places its ranks (docs/gpu.md).
  enum class GpuMode { single, process };
  /// `FUSEDCOLL_GPU_MODE` = `single` (default) | `process`: `single` runs P virtual ranks as blocks
  /// of one launch on one GPU; `process` runs one rank per MPI process, each on its own device (or
  /// sharing one), peers reached through IPC mappings or the host proxy. `gpu::WorldOptions::mode`
  /// overrides it.
  GpuMode gpu_mode = GpuMode::single;

  /// Which peers the GPU backend's process mode reaches through its host proxy.
  enum class GpuProxy { automatic, all, off };
  /// `FUSEDCOLL_GPU_PROXY` = `auto` (default) | `all` | `off`: `auto` maps same-node peers through
  /// IPC and proxies the others; `all` proxies every peer (the cross-node path on one machine);
  /// `off` refuses peers on other nodes.
  GpuProxy gpu_proxy = GpuProxy::automatic;

  /// One line per variable whose value could not be parsed (that variable keeps its default).
  /// `enforce_env()` turns them into an `InvalidArgument`.
  std::vector<std::string> problems;

  /// Parses the current process environment.
  static Env from_environment();
};

/// The environment as read on first use. Never throws.
const Env& env() noexcept;

/// Throws `InvalidArgument` listing every unparsable `FUSEDCOLL_*` variable. Every entry point
/// calls it before doing any work, so a typo in a knob is an error, not a silent default.
void enforce_env();

}  // namespace fusedcoll
