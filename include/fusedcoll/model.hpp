#pragma once
/// @file
/// The cost model: what a device, its links and each shared tile kernel and codec call cost, for
/// the emulator in virtual time (docs/emulator.md) and the scale-out simulator. A `Preset` holds
/// the machine: a device (compute units, per-CU f32 rate, memory bandwidth, kernel launch) and its
/// links (peer links inside a node, NICs across nodes, one per device unless the node's devices
/// share fewer). A kernel call's cost is a
/// roofline of its flops and bytes on one compute unit, divided by the preset's efficiency for
/// that kernel. Presets are text files a user copies and edits; `mi250x`, `h100` and `host` are
/// built in. Model, assumptions, sources and calibration: docs/simulation.md.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusedcoll/compression.hpp"

namespace fusedcoll::model {

/// One device: a GPU (a GCD on the MI250X), or for `host` one core of the machine.
struct Device {
  /// Compute units (CUs, SMs). Workgroups on one compute unit run one at a time.
  int compute_units = 0;
  /// Workgroups a compute unit keeps resident; the emulator's residency limit is
  /// `resident_wgs_per_cu * compute_units`.
  int resident_wgs_per_cu = 0;
  /// f32 GFLOP/s of one compute unit (vector units; a multiply and an add count as two).
  double cu_gflops = 0;
  /// Device memory bandwidth, GB/s (1e9 B/s), bytes read plus bytes written. A compute unit gets
  /// an equal share: `memory_gbps / compute_units`.
  double memory_gbps = 0;
  /// Kernel launch: from the host's call until the first workgroup runs, microseconds.
  double launch_us = 0;
  /// Memory bandwidth of a whole node (its `Links::gpus_per_node` devices together), GB/s, bytes
  /// read plus written. A GPU has its own memory: then this is the sum of its devices' and never
  /// limits one. When it is less (the devices of `host` are cores of one machine), the node's
  /// memory is a resource its devices share: see `shares_node_memory`.
  double node_memory_gbps = 0;
  /// How `gemm` tiles are priced. 0 (the GPU presets): the roofline of the tile's flops and bytes,
  /// a workgroup's loads overlapping its arithmetic. r > 0: `detail::gemm_tile`'s packed CPU
  /// form, whose micro-kernel computes r rows at a time (`detail::gemm_tile_row_block`): the tile
  /// first copies its `k x cols` panel of B into a contiguous buffer (priced as a `copy` of those
  /// bytes, not overlapped), then computes `ceil(rows / r) * r` rows at the `gemm` efficiency, so
  /// a tile's cost has a part that does not shrink with its rows. Optional in a preset file (0).
  int gemm_pack_rows = 0;
  /// With `gemm_pack_rows`: the rate of a tile's panel packing when the panel comes from memory,
  /// not cache (`Work::first_touch`: the kernel's first tile on that panel of that expert), GB/s
  /// read plus written, per compute unit. A strided read of `k` rows of `4 * cols` bytes, bound
  /// by the memory's latency, far below `memory_gbps`. Optional in a preset file; 0: no such
  /// term (every packing at the warm rate).
  double gemm_cold_gbps = 0;
  /// The time of one round of a workgroup's loads from device memory, microseconds: its threads
  /// each issue their loads of one step of the tile's loop and wait for them before the next (the
  /// GPU port's tiles: `load_round_bytes` a round). A workgroup then needs at least
  /// `latency_seconds` for a call however idle its compute unit, and the other workgroups
  /// resident on the unit run meanwhile: a lone tile is latency-bound, several share the unit's
  /// bandwidth. Optional in a preset file; 0: no such term (a CPU core's prefetchers stream).
  double load_latency_us = 0;
  /// Where the node's devices are processes that outnumber its cores (a `host` preset whose
  /// devices are fractions of a core): the time a device that waited for another takes to run
  /// again once what it waited for is there, microseconds, the operating system's hand-over
  /// between processes sharing a core (`model::handover_seconds`). Optional in a preset file;
  /// 0: no such term (a device of its own hardware).
  double handover_us = 0;
  /// The cache the node's devices share, MiB (2^20 bytes): a call whose device works over a
  /// working set that, times the devices sharing the node, fits it moves its bytes at
  /// `cache_gbps` and draws nothing from the node's memory (`model::in_cache`). Optional in a
  /// preset file; 0: no such term (every byte from memory, the GPU presets' roofline).
  double cache_mib = 0;
  /// One device's memcpy rate in that cache, GB/s read plus written; its compute units share it
  /// as they share `memory_gbps`. Required where `cache_mib` is above 0.
  double cache_gbps = 0;
};

/// How the devices of a node reach each other.
enum class PeerTopology : std::uint8_t {
  mesh,     ///< A link of `peer_gbps` to every other device of the node (Infinity Fabric).
  switched,  ///< One port of `peer_gbps` per device, shared by all its peers (NVLink + NVSwitch).
  /// The node's devices are slices of one device (ranks as blocks of one launch on one GPU): a
  /// put into a peer's buffer is a copy through that device's one memory, which every put of the
  /// node shares (`node_memory_gbps`, read + written: `model::peer_seconds`); `peer_gbps` is not
  /// used. One device putting alone gets the whole memory, all putting at once a share each.
  shared
};
const char* to_string(PeerTopology t) noexcept;

/// The links. Ranks `r` and `q` share a node when `r / gpus_per_node == q / gpus_per_node`.
struct Links {
  int gpus_per_node = 0;
  PeerTopology peer_topology = PeerTopology::mesh;
  /// Inside a node: bandwidth of one link (mesh) or port (switched), GB/s per direction, and the
  /// latency of a transfer, microseconds.
  double peer_gbps = 0;
  double peer_us = 0;
  /// Across nodes: one NIC's bandwidth, GB/s per direction, and the latency.
  double nic_gbps = 0;
  double nic_us = 0;
  /// The issuing compute unit's time for one put, store or signal to another device,
  /// microseconds: the software that hands a message to the transport (an MPI call on `host`; a
  /// few instructions on a GPU, 0). The bytes then travel on the link without the compute unit.
  double put_us = 0;
  /// The share of a put's time on a peer link (inside a node) that the issuing compute unit
  /// spends moving its bytes, in [0, 1]: 0 where a DMA engine or the fabric carries them while the
  /// compute unit goes on (GPUs), 1 where the issuing core copies them itself (`host`: an
  /// `MPI_Put` into a shared-memory window is a `memcpy` by the caller). Puts across nodes leave
  /// through the NIC and occupy it only for `nic_cpu_gbps`.
  double put_cu_share = 0;
  /// The NICs of a node, in [1, gpus_per_node]; 0 (a preset file that leaves it out): one per
  /// device. Device d of a node (d = rank % gpus_per_node) sends across nodes through the node's
  /// NIC d % nics_per_node, which the devices sharing it take in turn: a host whose ranks each
  /// stream over the host's one link is `nics_per_node = 1` with the whole link's `nic_gbps`.
  /// Last, so that brace-initialised `Links` written before it stay valid.
  int nics_per_node = 0;
  /// The host CPU's cost of moving bytes across nodes, GB/s of one compute unit: a put of `b`
  /// bytes to another node keeps a compute unit of the sender and one of the receiver busy
  /// `b / nic_cpu_gbps` each (the kernel's copy and TCP/IP work of a socket transport, done on the
  /// ranks' own cores), overlapping the bytes' time on the wire. 0 (a preset file that leaves it
  /// out): no such cost, as for a NIC that DMAs (RDMA, the GPU presets). Last, as nics_per_node.
  double nic_cpu_gbps = 0;

  bool same_node(int a, int b) const noexcept { return a / gpus_per_node == b / gpus_per_node; }
  /// The NICs of a node (`nics_per_node`, or `gpus_per_node` where that is 0).
  int nics() const noexcept { return nics_per_node > 0 ? nics_per_node : gpus_per_node; }
  /// The NIC rank `r` sends across nodes through, numbered over all nodes:
  /// `node * nics() + local % nics()`.
  int nic_of(int r) const noexcept {
    return r / gpus_per_node * nics() + r % gpus_per_node % nics();
  }
  /// The NIC through which bytes from rank `src` enter `dst`'s node (another node's), numbered as
  /// `nic_of`: the one of `src`'s rail (its NIC's index within the node), from which the node
  /// forwards them to `dst`. Every flow into a node on one rail shares that NIC's ingress; flows
  /// on different rails do not (docs/simulation.md, "The receiver's NIC").
  int ingress_nic(int src, int dst) const noexcept {
    return dst / gpus_per_node * nics() + src % gpus_per_node % nics();
  }
};

/// The costed kernels: the shared tile kernels (detail/kernels.hpp), a plain copy, and the wire
/// codecs (detail/wire.hpp) by format (E4M3 and E5M2 share the fp8 entries).
enum class Kernel : std::uint8_t {
  gemm,
  gemv,
  embedding,
  reduce,
  copy,
  encode_f16,
  decode_f16,
  encode_bf16,
  decode_bf16,
  encode_fp8,
  decode_fp8,
  /// The scaled wires' pass over the input for its largest magnitude (read only).
  amax,
};
inline constexpr int kKernels = 12;
/// The kernel's name as a preset's `[efficiency]` key writes it ("gemm", "encode_f16", ...).
const char* to_string(Kernel k) noexcept;

/// What one call of a kernel does: its f32 operations and the bytes it reads plus writes.
struct Work {
  Kernel kernel = Kernel::copy;
  double flops = 0;
  double bytes = 0;
  /// A `gemm` tile's shape (set by `gemm`; 0 elsewhere): what a preset with
  /// `Device::gemm_pack_rows` prices instead of the roofline.
  std::int64_t rows = 0, cols = 0, k = 0;
  /// A `gemm` tile whose panel of B its kernel has not used before on this device: its packing
  /// reads the panel from memory (`Device::gemm_cold_gbps`), unless the kernel's working set (its
  /// experts' weights among it) is `in_cache` (`cache_seconds`): then the previous call left it
  /// there.
  bool first_touch = false;
};

/// `detail::gemm_tile` of `rows x cols`, inner dimension `k`: 2·rows·cols·k flops; reads A's
/// rows and B's panel, writes C. Carries the shape for `Device::gemm_pack_rows`.
Work gemm(std::int64_t rows, std::int64_t cols, std::int64_t k, bool first_touch = false);
/// `detail::gemv_rows` of `n` output columns for `m` input rows and inner dimension `k`: streams
/// `n x k` of W.
Work gemv(std::int64_t m, std::int64_t k, std::int64_t n);
/// `detail::embedding_bag_rows` gathering `rows` table rows of `dim` floats into `bags` pooled
/// rows, with `index_bytes` per index (4 or 8); `weighted` multiplies each row by its weight.
Work embedding(std::int64_t rows, std::int64_t bags, std::int64_t dim, int index_bytes = 8,
               bool weighted = false);
/// `detail::reduce_into` of `count` elements of `elem_bytes` each: reads two, writes one.
Work reduce(std::int64_t count, std::int64_t elem_bytes = 4);
/// A copy of `bytes` bytes (unpacking a received buffer, a local result into place).
Work copy(std::int64_t bytes);
/// The largest magnitude of `count` f32 values (the compressed wire's scale agreement): a
/// read-only pass, one operation and 4 bytes read per element, at `efficiency.amax`.
Work amax(std::int64_t count);
/// Encoding `count` f32 values to `format` (scaled: one more multiply per element).
Work encode(WireFormat format, std::int64_t count, bool scaled = false);
/// Decoding `count` values of `format` to f32.
Work decode(WireFormat format, std::int64_t count, bool scaled = false);

/// `detail::wire_reduce` over `count` elements: `wire` sources decoded, `round_trip` sources
/// encoded and decoded, `plain` f32 sources, folded by one reduction fewer than there are
/// sources; then, with `encode_result`, the result encoded and, with `decode_result`, decoded
/// (into wire bytes and f32 output; encoded only: a ring's running value, which only travels),
/// else stored. Priced as its encode, decode and reduce steps (each with its kernel's operations
/// and efficiency) counting only the bytes that reach memory: the sources read and the outputs
/// written. The fused pass keeps decoded operands and the partial result in cache.
std::array<Work, 3> wire_reduce(WireFormat format, std::int64_t count, bool scaled, int wire,
                                int round_trip, int plain, bool encode_result,
                                bool decode_result = true);

/// A machine: the device, its links and the kernels' efficiencies.
struct Preset {
  std::string name;
  /// Where it came from: "built-in" or the file's path.
  std::string origin;
  Device device;
  Links links;
  /// Fraction of the roofline each kernel achieves, in (0, 4]: a call takes
  /// `max(flops / cu_rate, bytes / cu_bandwidth) / efficiency`. Above 1 where a kernel moves its
  /// bytes faster than the copy that measured the bandwidth (a calibrated preset can say so).
  std::array<double, kKernels> efficiency{};
  /// Optional, per kernel (`[efficiency]` key `<kernel>_in_cache`; 0: not measured): the fraction
  /// of `cu_gflops` a kernel's operations reach with its working set in the cache, where no
  /// memory bounds them (`cache_seconds`). A calibrated host preset gives it for the codecs and
  /// `amax`, timed on cache-sized buffers.
  std::array<double, kKernels> in_cache{};

  double efficiency_of(Kernel k) const { return efficiency[static_cast<int>(k)]; }
  double in_cache_of(Kernel k) const { return in_cache[static_cast<int>(k)]; }
};

/// Seconds `w` takes on one compute unit of `p`'s device: its roofline over its efficiency, or
/// for a `gemm` tile on a device with `gemm_pack_rows`, its panel copy plus its whole
/// micro-kernel rows of arithmetic.
double seconds(const Preset& p, const Work& w);
/// The GPU port's workgroup: 256 threads (gpu/runtime.hpp `kThreads`).
inline constexpr int kWorkgroupThreads = 256;
/// Bytes one round of a workgroup's loads brings for `k` (`Device::load_latency_us`): a word per
/// thread where the GPU port's tile loads scalars (`gemm`, `gemv`, `embedding`), 16 bytes per
/// thread where it loads vectors (the copies, reductions, codecs and the amax pass).
double load_round_bytes(Kernel k);
/// Seconds one workgroup needs for `w` however idle its compute unit: `w`'s bytes (read plus
/// written, as the roofline counts them) in rounds of `load_round_bytes`, each
/// `Device::load_latency_us` long. 0 where the preset has no such term. The emulator and the
/// simulator hold the workgroup, not its compute unit, for what exceeds `seconds(p, w)`.
double latency_seconds(const Preset& p, const Work& w);
/// Seconds a device that waited for another's data or signal takes to run again once it is there
/// (`Device::handover_us`; 0 where the preset has none). The emulator adds it to a workgroup's
/// wait that ended on another device's signal after the workgroup was ready, the simulator to an
/// exchange whose last byte came after the rank was ready.
double handover_seconds(const Preset& p);
/// Whether the devices of a node share its memory: `node_memory_gbps` below `gpus_per_node`
/// times `memory_gbps`. Only then does the node's memory limit its devices (`node_memory_seconds`;
/// the emulator splits it evenly among them); otherwise no device can slow another's.
bool shares_node_memory(const Preset& p);
/// Seconds `w`'s bytes occupy the node's memory: `bytes / (node_memory_gbps * efficiency)`. A
/// kernel that reaches a fraction of `memcpy`'s rate on one device reaches the same fraction of
/// the node's: above 1 it draws fewer bytes than it counts (cache hits, no read of the lines it
/// overwrites), below 1 its access pattern gets less out of the memory.
double node_memory_seconds(const Preset& p, const Work& w);
/// Whether a kernel whose device works over `working_set` bytes (its buffers on that device,
/// reused call after call) finds them in the cache: the preset has one (`Device::cache_mib`),
/// the working set is declared (above 0), and the working sets of the `node_share` devices
/// sharing the node (at least this one; 0 counts as 1: a device of its own) fit it together.
bool in_cache(const Preset& p, double working_set, int node_share);
/// Seconds `w` takes on one compute unit with its bytes in the cache: its roofline with the
/// unit's share of `cache_gbps` in place of `memory_gbps`, over the kernel's efficiency (measured
/// against memcpy from memory, and kept: docs/simulation.md, "A working set in the cache"). A
/// kernel with an in-cache figure (`Preset::in_cache`) instead takes the longer of its operations
/// at that fraction of `cu_gflops` and its bytes at the cache's rate. A packed `gemm` tile
/// (`Device::gemm_pack_rows`) keeps `seconds`, with its panel packed as a warm one's even on the
/// kernel's first touch (`Work::first_touch`).
double cache_seconds(const Preset& p, const Work& w);
/// Seconds a compute span doing `works` holds its compute unit: the sum of their `seconds`, or,
/// where `node_share` devices of the run share the node's memory (0: none do, or the preset's
/// devices have memory of their own), their bytes at one device's equal share of it when that
/// is longer (`node_memory_seconds` times `node_share`). The emulator's compute spans and the
/// simulator's tiles both (docs/simulation.md, "Shared node memory"). Where the span's kernel
/// works over `working_set` bytes that are `in_cache`, the sum of their `cache_seconds` instead,
/// and nothing of the node's memory (docs/simulation.md, "A working set in the cache").
double span_seconds(const Preset& p, std::span<const Work> works, int node_share,
                    double working_set = 0);
inline double span_seconds(const Preset& p, std::initializer_list<Work> works, int node_share,
                           double working_set = 0) {
  return span_seconds(p, std::span<const Work>(works.begin(), works.size()), node_share,
                      working_set);
}
/// `w` as one kernel spread over the whole device (every compute unit, all its bandwidth), for
/// work the model prices as a pass of its own (the compressed wire's amax): launch plus
/// `max(flops / (cu_rate * compute_units), bytes / memory_bandwidth) / efficiency`.
double device_seconds(const Preset& p, const Work& w);
/// Seconds `bytes` hold a peer link (inside a node): bytes over `peer_gbps`, or with
/// `PeerTopology::shared` a copy of them through the node's one memory (`node_memory_seconds`).
double peer_seconds(const Preset& p, std::int64_t bytes);
/// Seconds from `src` putting `bytes` to their arrival at `dst`, on an idle link: latency plus
/// bytes over the link's bandwidth (`peer_seconds` inside a node). 0 for `src == dst`.
double transfer_seconds(const Preset& p, int src, int dst, std::int64_t bytes);
/// Seconds the issuing compute unit spends on one put, store or signal from `src` to `dst`
/// (`Links::put_us`: the software that hands a message to the transport); 0 for `src == dst`. The
/// emulator books it before every such call, the simulator on the tiles that make them.
double issue_seconds(const Preset& p, int src, int dst);
/// Seconds a put of `bytes` from `src` to `dst` keeps a compute unit of each of them busy in the
/// host's network stack (`Links::nic_cpu_gbps`): 0 inside a node or where the preset has none.
double nic_cpu_seconds(const Preset& p, int src, int dst, std::int64_t bytes);
/// The kernel launch, seconds.
inline double launch_seconds(const Preset& p) { return p.device.launch_us * 1e-6; }

/// The built-in presets' names ("h100", "host", "mi250x").
std::vector<std::string> preset_names();
/// The text of a built-in preset (its file, comments and sources included): what a user copies
/// to make their own. Throws `InvalidArgument` for an unknown name.
std::string_view preset_text(std::string_view name);
/// A built-in preset by name, or the preset file at a path (a value with a '/' or ending in
/// ".preset"). Throws `InvalidArgument` naming the problem: an unknown name, an unreadable file,
/// a missing, unknown or repeated field, a value out of range.
Preset load_preset(const std::string& name_or_path);
/// Parses preset text; `origin` names it in errors.
Preset parse_preset(std::string_view text, const std::string& origin);
/// Checks every field of `p` as the parser does (the emulator checks presets built in code).
void validate(const Preset& p);
/// `p` as preset text that `parse_preset` reads back to an equal preset (without the comments).
std::string to_text(const Preset& p);

}  // namespace fusedcoll::model
