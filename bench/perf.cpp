// fusedcoll-perf: nccl-tests-style benchmark of fusedcoll's collectives and fused operators.
//
//   fusedcoll-perf allreduce -b 1K -e 64M -f 4 -g 4
//   fusedcoll-perf embedding -b 64K -e 16M -f 4 --link-gbps 10
//
// Subcommands: allreduce, alltoall, reducescatter, allgather, broadcast (one row per size), and
// the fused operators embedding, gemv, gemm (unfused vs scale_up vs scale_out per size).
//
// Sizes follow nccl-tests: `size` is the bytes of the whole (uncompressed) buffer a rank holds —
// AllReduce and Broadcast: the buffer; AllGather: the gathered output; ReduceScatter: the input
// of all chunks; All-to-All: the send buffer. algbw = size / time; busbw = algbw x the factor of
// docs/benchmarking.md (AllReduce 2(P-1)/P, the others (P-1)/P, Broadcast 1), the bandwidth each
// rank's link must carry with an optimal algorithm. `wire` is measured: the bytes a rank's device
// actually put or stored into peers during one call (mean over ranks).
//
// Timing: the n iterations are split into batches; each batch is barrier, clock, back-to-back
// calls, barrier, clock, and the time of a call is the median over batches of batch time / calls.
// Check (-c 1, default): after timing, outputs are poisoned, the op runs once more, and every
// rank's output is compared bit for bit with ref/ on the same inputs: `#wrong` counts differing
// elements (it must be 0; the exit status is 1 otherwise).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fusedcoll/emu.hpp"
#include "fusedcoll/fusedcoll.hpp"

namespace fc = fusedcoll;

namespace {

using Clock = std::chrono::steady_clock;

const char* const kUsage = R"(usage: fusedcoll-perf <op> [flags]
ops:   allreduce alltoall reducescatter allgather broadcast   (collectives)
       embedding gemv gemm                                     (fused vs unfused)
flags: -b BYTES   smallest size (K/M/G suffixes; default 1K, fused ops 64K)
       -e BYTES   largest size (default 64M, fused ops 16M)
       -f FACTOR  size multiplier per step (default 4)
       -n N       timed iterations per size (default 20)
       -w N       warm-up iterations per size (default 5)
       -c 0|1     check every output against ref/ bit for bit (default 1)
       -g P       ranks (default 4)
       -C C       compute units per virtual GPU (default 2)
       -o OP      reduction: sum avg min max (default sum)
       --algo direct|ring         AllReduce algorithm (default direct)
       --root R                   Broadcast root (default 0)
       --backend emu              where to run (emu; mpi: see docs/mpi.md)
       --compress F               wire format: none fp16 bf16 fp8-e4m3 fp8-e5m2 (default none;
                                  AllReduce, ReduceScatter, AllGather, All-to-All; compression.md)
       --scaling S                auto none tensor block (default auto: fp8 per tensor)
       --block N                  elements per scale with --scaling block (default 256)
       --pow2                     power-of-two scales
       --predivide                -o avg divides before summing
       --overflow saturate|ieee   out-of-range values (default saturate)
       --link-gbps X --link-us Y  emulator link model (default off)
       --csv | --json             machine-readable output
)";

struct Options {
  std::string op;
  std::int64_t min_bytes = -1, max_bytes = -1;
  double factor = 4;
  int iters = 20, warmup = 5;
  bool check = true;
  int ranks = 4, compute_units = 2;
  fc::ReduceOp redop = fc::ReduceOp::sum;
  fc::AllReduceAlgo algo = fc::AllReduceAlgo::direct;
  int root = 0;
  std::string backend = "emu";
  std::string compress = "none";
  fc::CompressionOptions wire;
  double link_gbps = 0, link_us = 0;
  enum class Format { table, csv, json } format = Format::table;
};

[[noreturn]] void usage_error(const std::string& what) {
  throw fc::InvalidArgument("fusedcoll-perf: " + what + "\n" + kUsage);
}

std::int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mul = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") mul = 1024;
  else if (suffix == "M" || suffix == "m") mul = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") mul = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) usage_error("bad size '" + s + "'");
  if (end == s.c_str() || !(v >= 0)) usage_error("bad size '" + s + "'");
  return static_cast<std::int64_t>(v * mul);
}

int parse_int(const std::string& s, const char* flag, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v < lo || v > hi)
    usage_error(fc::detail::make_string(flag, " '", s, "' is not an integer in [", lo, ", ", hi,
                                        "]"));
  return static_cast<int>(v);
}

double parse_double(const std::string& s, const char* flag) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(v >= 0))
    usage_error(fc::detail::make_string(flag, " '", s, "' is not a non-negative number"));
  return v;
}

bool is_fused(const std::string& op) { return op == "embedding" || op == "gemv" || op == "gemm"; }

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) usage_error("missing op");
  o.op = argv[1];
  const std::vector<std::string> ops = {"allreduce", "alltoall",  "reducescatter", "allgather",
                                        "broadcast", "embedding", "gemv",          "gemm"};
  if (o.op == "-h" || o.op == "--help") {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  if (std::find(ops.begin(), ops.end(), o.op) == ops.end()) usage_error("unknown op '" + o.op + "'");
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-b") o.min_bytes = parse_bytes(value());
    else if (a == "-e") o.max_bytes = parse_bytes(value());
    else if (a == "-f") {
      o.factor = parse_double(value(), "-f");
      if (o.factor <= 1) usage_error("-f must be > 1");
    } else if (a == "-n") o.iters = parse_int(value(), "-n", 1, 1000000);
    else if (a == "-w") o.warmup = parse_int(value(), "-w", 0, 1000000);
    else if (a == "-c") o.check = parse_int(value(), "-c", 0, 1) == 1;
    else if (a == "-g") o.ranks = parse_int(value(), "-g", 1, 64);
    else if (a == "-C") o.compute_units = parse_int(value(), "-C", 1, 64);
    else if (a == "-o") {
      const std::string v = value();
      if (v == "sum") o.redop = fc::ReduceOp::sum;
      else if (v == "avg") o.redop = fc::ReduceOp::avg;
      else if (v == "min") o.redop = fc::ReduceOp::min;
      else if (v == "max") o.redop = fc::ReduceOp::max;
      else usage_error("-o '" + v + "' is not sum, avg, min or max");
    } else if (a == "--algo") {
      const std::string v = value();
      if (v == "direct") o.algo = fc::AllReduceAlgo::direct;
      else if (v == "ring") o.algo = fc::AllReduceAlgo::ring;
      else usage_error("--algo '" + v + "' is not direct or ring");
    } else if (a == "--root") o.root = parse_int(value(), "--root", 0, 63);
    else if (a == "--backend") o.backend = value();
    else if (a == "--compress") {
      o.compress = value();
      if (o.compress == "none") o.wire.format = fc::WireFormat::none;
      else if (o.compress == "fp16") o.wire.format = fc::WireFormat::f16;
      else if (o.compress == "bf16") o.wire.format = fc::WireFormat::bf16;
      else if (o.compress == "fp8-e4m3") o.wire.format = fc::WireFormat::fp8_e4m3;
      else if (o.compress == "fp8-e5m2") o.wire.format = fc::WireFormat::fp8_e5m2;
      else usage_error("--compress '" + o.compress + "' is not none, fp16, bf16, fp8-e4m3, fp8-e5m2");
    } else if (a == "--scaling") {
      const std::string v = value();
      if (v == "auto") o.wire.scaling = fc::Scaling::automatic;
      else if (v == "none") o.wire.scaling = fc::Scaling::none;
      else if (v == "tensor") o.wire.scaling = fc::Scaling::per_tensor;
      else if (v == "block") o.wire.scaling = fc::Scaling::per_block;
      else usage_error("--scaling '" + v + "' is not auto, none, tensor or block");
    } else if (a == "--block") o.wire.block = parse_int(value(), "--block", 1, 1 << 30);
    else if (a == "--pow2") o.wire.pow2_scale = true;
    else if (a == "--predivide") o.wire.predivide = true;
    else if (a == "--overflow") {
      const std::string v = value();
      if (v == "saturate") o.wire.overflow = fc::Overflow::saturate;
      else if (v == "ieee") o.wire.overflow = fc::Overflow::ieee;
      else usage_error("--overflow '" + v + "' is not saturate or ieee");
    }
    else if (a == "--link-gbps") o.link_gbps = parse_double(value(), "--link-gbps");
    else if (a == "--link-us") o.link_us = parse_double(value(), "--link-us");
    else if (a == "--csv") o.format = Options::Format::csv;
    else if (a == "--json") o.format = Options::Format::json;
    else usage_error("unknown flag '" + a + "'");
  }
  if (o.min_bytes < 0) o.min_bytes = is_fused(o.op) ? 64 << 10 : 1 << 10;
  if (o.max_bytes < 0) o.max_bytes = is_fused(o.op) ? 16 << 20 : 64 << 20;
  if (o.max_bytes < o.min_bytes) usage_error("-e is smaller than -b");
  if (o.backend != "emu")
    usage_error("--backend '" + o.backend + "': this build runs the emu backend only");
  if (o.wire.format != fc::WireFormat::none && (o.op == "broadcast" || is_fused(o.op)))
    usage_error("--compress: " + o.op + " has no compressed wire (AllReduce, ReduceScatter, "
                "AllGather and All-to-All have)");
  fc::check(o.wire);
  if (o.root >= o.ranks) usage_error("--root is not a rank");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Times `call` on every rank: `batches` x (barrier, clock, `per_batch` calls, barrier, clock).
/// Returns the median seconds per call.
double time_calls(fc::emu::World& world, const std::function<void(fc::Communicator&)>& call,
                  int warmup, int iters) {
  const int batches = std::min(iters, 5);
  const int per_batch = std::max(1, iters / batches);
  std::vector<double> per_call;
  world.run([&](fc::Communicator& comm) {
    for (int i = 0; i < warmup; ++i) call(comm);
    for (int b = 0; b < batches; ++b) {
      fc::barrier(comm);
      const auto t0 = Clock::now();
      for (int i = 0; i < per_batch; ++i) call(comm);
      fc::barrier(comm);
      if (comm.rank() == 0)
        per_call.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / per_batch);
    }
  });
  return median(per_call);
}

/// Elements of `a` and `b` (same length) whose bits differ.
std::int64_t count_wrong(const void* a, const void* b, std::size_t bytes, std::size_t elem) {
  std::int64_t wrong = 0;
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < bytes; i += elem)
    if (std::memcmp(x + i, y + i, elem) != 0) ++wrong;
  return wrong;
}

// ---------------------------------------------------------------------------------------------
// Output

struct Row {
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  std::string shape;      // fused ops
  double seconds = 0;     // collectives: the call; fused: unfused
  double up_seconds = 0;  // fused: scale_up
  double out_seconds = 0;  // fused: scale_out
  double busbw_factor = 1;
  double wire = 0;  // bytes per rank per call (fused: scale_up)
  std::int64_t wrong = 0;
  // Lossy runs: error of the output against the uncompressed collective's.
  double max_abs = 0, max_rel = 0, rms = 0;
};

class Printer {
 public:
  Printer(const Options& o) : o_(o) {}

  void header() {
    const bool fused = is_fused(o_.op);
    if (o_.format == Options::Format::json) {
      std::printf("{\"op\":\"%s\",\"ranks\":%d,\"compute_units\":%d,\"backend\":\"%s\","
                  "\"compress\":\"%s\",\"link_gbps\":%g,\"link_us\":%g,\"rows\":[",
                  o_.op.c_str(), o_.ranks, o_.compute_units, o_.backend.c_str(),
                  o_.compress.c_str(), o_.link_gbps, o_.link_us);
      return;
    }
    if (o_.format == Options::Format::csv) {
      std::puts(fused ? "size,shape,unfused_us,scale_up_us,scale_out_us,up_ratio,out_ratio,"
                        "wire_bytes,wrong"
                      : "size,count,type,redop,root,time_us,algbw_gbs,busbw_gbs,wire_bytes,"
                        "wrong,max_abs_err,max_rel_err,rms_err");
      return;
    }
    std::printf("# fusedcoll-perf %s: %d ranks x %d compute units, backend %s, compress %s, "
                "link %s\n",
                o_.op.c_str(), o_.ranks, o_.compute_units, o_.backend.c_str(), o_.compress.c_str(),
                o_.link_gbps > 0 || o_.link_us > 0
                    ? fc::detail::make_string(o_.link_gbps, " GB/s + ", o_.link_us, " us").c_str()
                    : "off");
    std::printf("# %d warm-up + %d timed iterations per size; time = median over batches\n",
                o_.warmup, o_.iters);
    if (fused)
      std::printf("%12s  %-34s %11s %11s %11s %8s %8s %12s %7s\n", "size(B)", "shape",
                  "unfused(us)", "scale_up", "scale_out", "up/unf", "out/unf", "wire(B)",
                  "#wrong");
    else
      std::printf("%12s %12s %6s %6s %5s %11s %9s %9s %12s %7s%s\n", "size(B)", "count", "type",
                  "redop", "root", "time(us)", "algbw", "busbw", "wire(B)", "#wrong",
                  lossy() ? "    max|err|    max rel        rms" : "");
  }

  void row(const Row& r) {
    const bool fused = is_fused(o_.op);
    const double algbw = r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
    const double busbw = algbw * r.busbw_factor;
    const char* redop = o_.op == "allreduce" || o_.op == "reducescatter" ? fc::to_string(o_.redop)
                                                                         : "none";
    const int root = o_.op == "broadcast" ? o_.root : -1;
    if (o_.format == Options::Format::json) {
      if (fused)
        std::printf("%s\n{\"size\":%lld,\"shape\":\"%s\",\"unfused_us\":%.3f,\"scale_up_us\":%.3f,"
                    "\"scale_out_us\":%.3f,\"wire_bytes\":%.0f,\"wrong\":%lld}",
                    first_ ? "" : ",", static_cast<long long>(r.bytes), r.shape.c_str(),
                    r.seconds * 1e6, r.up_seconds * 1e6, r.out_seconds * 1e6, r.wire,
                    static_cast<long long>(r.wrong));
      else
        std::printf("%s\n{\"size\":%lld,\"count\":%lld,\"type\":\"float\",\"redop\":\"%s\","
                    "\"root\":%d,\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
                    "\"wire_bytes\":%.0f,\"wrong\":%lld,\"max_abs_err\":%.6g,"
                    "\"max_rel_err\":%.6g,\"rms_err\":%.6g}",
                    first_ ? "" : ",", static_cast<long long>(r.bytes),
                    static_cast<long long>(r.count), redop, root, r.seconds * 1e6, algbw, busbw,
                    r.wire, static_cast<long long>(r.wrong), r.max_abs, r.max_rel, r.rms);
      first_ = false;
    } else if (o_.format == Options::Format::csv) {
      if (fused)
        std::printf("%lld,%s,%.3f,%.3f,%.3f,%.4f,%.4f,%.0f,%lld\n",
                    static_cast<long long>(r.bytes), r.shape.c_str(), r.seconds * 1e6,
                    r.up_seconds * 1e6, r.out_seconds * 1e6, r.up_seconds / r.seconds,
                    r.out_seconds / r.seconds, r.wire, static_cast<long long>(r.wrong));
      else
        std::printf("%lld,%lld,float,%s,%d,%.3f,%.4f,%.4f,%.0f,%lld,%.6g,%.6g,%.6g\n",
                    static_cast<long long>(r.bytes), static_cast<long long>(r.count), redop, root,
                    r.seconds * 1e6, algbw, busbw, r.wire, static_cast<long long>(r.wrong),
                    r.max_abs, r.max_rel, r.rms);
    } else if (fused) {
      std::printf("%12lld  %-34s %11.1f %11.1f %11.1f %8.3f %8.3f %12.0f %7lld\n",
                  static_cast<long long>(r.bytes), r.shape.c_str(), r.seconds * 1e6,
                  r.up_seconds * 1e6, r.out_seconds * 1e6, r.up_seconds / r.seconds,
                  r.out_seconds / r.seconds, r.wire, static_cast<long long>(r.wrong));
    } else {
      std::printf("%12lld %12lld %6s %6s %5d %11.1f %9.3f %9.3f %12.0f %7lld",
                  static_cast<long long>(r.bytes), static_cast<long long>(r.count), "float",
                  redop, root, r.seconds * 1e6, algbw, busbw, r.wire,
                  static_cast<long long>(r.wrong));
      if (lossy()) std::printf(" %11.3e %10.3e %10.3e", r.max_abs, r.max_rel, r.rms);
      std::printf("\n");
    }
    std::fflush(stdout);
  }

  bool lossy() const { return o_.wire.format != fc::WireFormat::none; }

  void footer() {
    if (o_.format == Options::Format::json) std::puts("\n]}");
  }

 private:
  const Options& o_;
  bool first_ = true;
};

// ---------------------------------------------------------------------------------------------
// Collectives

void run_on(fc::Communicator& comm, const fc::AllReduceArgs& a) { fc::all_reduce(comm, a); }
void run_on(fc::Communicator& comm, const fc::ReduceScatterArgs& a) { fc::reduce_scatter(comm, a); }
void run_on(fc::Communicator& comm, const fc::AllGatherArgs& a) { fc::all_gather(comm, a); }
void run_on(fc::Communicator& comm, const fc::AllToAllvArgs& a) { fc::all_to_allv(comm, a); }
void run_on(fc::Communicator& comm, const fc::BroadcastArgs& a) { fc::broadcast(comm, a); }

/// ref/'s collective of the kind of `first`, over every rank's arguments in `all`.
template <class Args, class Variant>
void ref_on(const Args&, const std::vector<Variant>& all) {
  std::vector<Args> typed;
  for (const auto& v : all) typed.push_back(std::get<Args>(v));
  if constexpr (std::is_same_v<Args, fc::AllReduceArgs>) fc::ref::all_reduce(typed);
  else if constexpr (std::is_same_v<Args, fc::ReduceScatterArgs>) fc::ref::reduce_scatter(typed);
  else if constexpr (std::is_same_v<Args, fc::AllGatherArgs>) fc::ref::all_gather(typed);
  else if constexpr (std::is_same_v<Args, fc::AllToAllvArgs>) fc::ref::all_to_allv(typed);
  else fc::ref::broadcast(typed);
}

/// Every rank's buffers and arguments for one collective at one size.
struct CollectiveCase {
  std::vector<std::vector<float>> send, recv;
  std::function<void(fc::Communicator&)> call;  // the op on comm.rank()'s buffers
  /// ref/ on the same inputs with wire options `wire`, into `out` (one buffer per rank).
  std::function<void(const fc::CompressionOptions& wire, std::vector<std::vector<float>>& out)> ref;
  std::int64_t bytes = 0, count = 0;
  double busbw_factor = 1;
};

/// On the heap: its closures refer to its buffers.
std::unique_ptr<CollectiveCase> make_collective(const Options& o, std::int64_t bytes) {
  const int P = o.ranks;
  auto holder = std::make_unique<CollectiveCase>();
  CollectiveCase& c = *holder;
  const double nm1 = static_cast<double>(P - 1) / P;
  // Element counts: the whole buffer is `bytes`; a per-rank piece is bytes / P.
  const std::int64_t elems = std::max<std::int64_t>(bytes / 4, 1);
  const auto pieces = fc::split_evenly(elems, P);
  const std::int64_t per_peer = std::max<std::int64_t>(elems / P, 1);
  std::int64_t send_elems = elems, recv_elems = elems;
  c.count = elems;
  c.busbw_factor = nm1;
  // One rank's arguments, writing into `recv`, with wire options `wire` (Broadcast has none).
  using AnyArgs = std::variant<fc::AllReduceArgs, fc::ReduceScatterArgs, fc::AllGatherArgs,
                               fc::AllToAllvArgs, fc::BroadcastArgs>;
  std::function<AnyArgs(int, float*, const fc::CompressionOptions&)> args;
  if (o.op == "allreduce") {
    c.busbw_factor = 2 * nm1;
    args = [&o, &c](int r, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      fc::AllReduceArgs a;
      a.send = c.send[r].data();
      a.recv = recv;
      a.count = c.count;
      a.op = o.redop;
      a.algo = o.algo;
      a.wire = wire;
      return a;
    };
  } else if (o.op == "reducescatter") {
    args = [&o, &c, pieces](int r, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      return fc::ReduceScatterArgs{c.send[r].data(), recv, pieces, fc::DType::f32, o.redop, wire};
    };
  } else if (o.op == "allgather") {
    args = [&c, pieces](int r, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      return fc::AllGatherArgs{c.send[r].data(), recv, pieces, fc::DType::f32, wire};
    };
  } else if (o.op == "alltoall") {
    send_elems = recv_elems = c.count = per_peer * P;
    args = [&c, per_peer, P](int r, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      auto a = fc::make_alltoall(c.send[r].data(), recv, per_peer, fc::DType::f32, P);
      a.wire = wire;
      return a;
    };
  } else {  // broadcast
    c.busbw_factor = 1;
    args = [&o, &c](int r, float* recv, const fc::CompressionOptions&) -> AnyArgs {
      return fc::BroadcastArgs{c.send[r].data(), recv, c.count, fc::DType::f32, o.root};
    };
  }
  c.bytes = c.count * 4;
  c.send.resize(P);
  c.recv.resize(P);
  for (int r = 0; r < P; ++r) {
    const std::int64_t s = o.op == "allgather" ? pieces[r] : send_elems;
    const std::int64_t d = o.op == "reducescatter" ? pieces[r] : recv_elems;
    c.send[r].resize(s);
    c.recv[r].resize(d);
    fc::fill_values(c.send[r].data(), s, fc::DType::f32, 2024, 1, r, fc::ValueMode::random);
  }
  c.call = [&c, &o, args](fc::Communicator& comm) {
    const int r = comm.rank();
    std::visit([&](const auto& a) { run_on(comm, a); }, args(r, c.recv[r].data(), o.wire));
  };
  c.ref = [&c, args, P](const fc::CompressionOptions& wire, std::vector<std::vector<float>>& out) {
    out.resize(P);
    std::vector<AnyArgs> all;
    for (int r = 0; r < P; ++r) {
      out[r].assign(c.recv[r].size(), 0.0f);
      all.push_back(args(r, out[r].data(), wire));
    }
    std::visit([&](const auto& first) { ref_on(first, all); }, all[0]);
  };
  return holder;
}

double wire_per_rank(fc::emu::World& world, std::vector<std::uint64_t>& last, double calls) {
  double total = 0;
  for (int r = 0; r < world.size(); ++r) {
    const std::uint64_t now = world.bytes_sent(r);
    total += static_cast<double>(now - last[r]);
    last[r] = now;
  }
  return total / world.size() / calls;
}

fc::emu::WorldOptions world_options(const Options& o) {
  fc::emu::WorldOptions w;
  w.world_size = o.ranks;
  w.device.compute_units = o.compute_units;
  w.link_gbps = o.link_gbps;
  w.link_latency_us = o.link_us;
  return w;
}

/// The sizes of the sweep -b, -b*f, ... up to -e.
std::vector<std::int64_t> sweep(const Options& o) {
  std::vector<std::int64_t> sizes;
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0001;
       b *= o.factor)
    sizes.push_back(static_cast<std::int64_t>(b));
  return sizes;
}

/// Calls `time_calls` makes: the warm-up and the timed batches.
int calls_per_size(const Options& o) {
  const int batches = std::min(o.iters, 5);
  return o.warmup + batches * std::max(1, o.iters / batches);
}

std::int64_t run_collectives(const Options& o, Printer& out) {
  fc::emu::World world(world_options(o));
  std::vector<std::uint64_t> sent(o.ranks, 0);
  std::int64_t wrong_total = 0;
  for (const std::int64_t b : sweep(o)) {
    // Keep the size a multiple of 4 * P bytes so every rank's piece is whole elements.
    const std::int64_t unit = 4LL * o.ranks;
    const std::int64_t bytes = std::max<std::int64_t>(unit, b / unit * unit);
    const auto holder = make_collective(o, bytes);
    CollectiveCase& c = *holder;
    Row row;
    row.bytes = c.bytes;
    row.count = c.count;
    row.busbw_factor = c.busbw_factor;
    (void)wire_per_rank(world, sent, 1);
    row.seconds = time_calls(world, c.call, o.warmup, o.iters);
    row.wire = wire_per_rank(world, sent, calls_per_size(o));
    if (o.check) {
      std::vector<std::vector<float>> expect;
      c.ref(o.wire, expect);
      for (auto& r : c.recv) fc::poison(r.data(), r.size() * 4);
      world.run([&](fc::Communicator& comm) { c.call(comm); });
      (void)wire_per_rank(world, sent, 1);
      for (int r = 0; r < o.ranks; ++r)
        row.wrong += count_wrong(c.recv[r].data(), expect[r].data(), c.recv[r].size() * 4, 4);
      if (o.wire.format != fc::WireFormat::none) {
        // What compression costs: the result against the same collective without it.
        std::vector<std::vector<float>> exact;
        c.ref(fc::CompressionOptions{}, exact);
        double sq = 0;
        std::int64_t n = 0;
        for (int r = 0; r < o.ranks; ++r)
          for (std::size_t i = 0; i < exact[r].size(); ++i) {
            const double d = std::abs(double(c.recv[r][i]) - double(exact[r][i]));
            row.max_abs = std::max(row.max_abs, d);
            if (exact[r][i] != 0) row.max_rel = std::max(row.max_rel, d / std::abs(double(exact[r][i])));
            sq += d * d;
            ++n;
          }
        row.rms = n ? std::sqrt(sq / n) : 0;
      }
    }
    wrong_total += row.wrong;
    out.row(row);
  }
  return wrong_total;
}

// ---------------------------------------------------------------------------------------------
// Fused operators: the size is the bytes of one rank's output.

struct FusedCase {
  std::string shape;
  std::int64_t bytes = 0;
  std::function<void(fc::Communicator&, fc::Mode)> call;
  std::function<void()> ref;  // ref/ into the outputs
  std::function<std::vector<std::vector<float>*>()> outputs;  // per rank
};

template <class Problem, class RefFn, class CallFn, class OutFn>
FusedCase make_fused(std::string shape, const Problem& problem, RefFn ref_fn, CallFn call_fn,
                     OutFn out_fn) {
  auto world = std::make_shared<decltype(fc::make_world(problem))>(fc::make_world(problem));
  auto args = std::make_shared<decltype(fc::args_of(*world))>(fc::args_of(*world));
  FusedCase c;
  c.shape = std::move(shape);
  c.call = [args, call_fn](fc::Communicator& comm, fc::Mode m) {
    call_fn(comm, (*args)[static_cast<std::size_t>(comm.rank())], m);
  };
  c.outputs = [world, out_fn] {
    std::vector<std::vector<float>*> v;
    for (auto& r : *world) v.push_back(&out_fn(r));
    return v;
  };
  c.ref = [args, ref_fn] { ref_fn(*args); };
  for (auto* v : c.outputs()) c.bytes = std::max<std::int64_t>(c.bytes, v->size() * 4);
  return c;
}

FusedCase make_fused_case(const Options& o, std::int64_t bytes) {
  const int P = o.ranks;
  if (o.op == "embedding") {
    auto p = fc::EmbeddingProblem::dlrm(P);
    // Output per rank: batch x T x D floats.
    const std::int64_t per_sample = p.num_tables() * p.dim * 4;
    p.batch_sizes.assign(P, std::max<std::int64_t>(1, bytes / per_sample));
    return make_fused(
        fc::detail::make_string("T=", p.num_tables(), " D=", p.dim, " B=", p.global_batch()), p,
        [](std::vector<fc::EmbeddingAllToAllArgs>& a) { fc::ref::embedding_alltoall(a); },
        [](fc::Communicator& c, const fc::EmbeddingAllToAllArgs& a, fc::Mode m) {
          fc::embedding_alltoall(c, a, m);
        },
        [](fc::EmbeddingRankData& d) -> std::vector<float>& { return d.output; });
  }
  if (o.op == "gemv") {
    auto p = fc::GemvProblem::transformer(P);
    // Output: M x N floats; K stays the transformer's.
    p.n = std::max<std::int64_t>(1, bytes / (p.m * 4));
    return make_fused(
        fc::detail::make_string("M=", p.m, " N=", p.n, " K=", p.k()), p,
        [](std::vector<fc::GemvAllReduceArgs>& a) { fc::ref::gemv_allreduce(a); },
        [](fc::Communicator& c, const fc::GemvAllReduceArgs& a, fc::Mode m) {
          fc::gemv_allreduce(c, a, m);
        },
        [](fc::GemvRankData& d) -> std::vector<float>& { return d.y; });
  }
  auto p = fc::GemmProblem::moe(P);
  // Output per rank: rows routed from it x N floats; routing uniform in [0, max_rows] per
  // (source, expert), so a source sends about E x max_rows / 2 rows.
  const std::int64_t rows = std::max<std::int64_t>(1, bytes / (p.n * 4));
  p.random_routing(std::max<std::int64_t>(1, 2 * rows / p.num_experts()));
  std::int64_t total = 0;
  for (auto c : p.counts) total += c;
  return make_fused(
      fc::detail::make_string("E=", p.num_experts(), " K=", p.k, " N=", p.n, " rows=", total), p,
      [](std::vector<fc::GemmAllToAllArgs>& a) { fc::ref::gemm_alltoall(a); },
      [](fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
        fc::gemm_alltoall(c, a, m);
      },
      [](fc::GemmRankData& d) -> std::vector<float>& { return d.output; });
}

std::int64_t run_fused(const Options& o, Printer& out) {
  fc::emu::World world(world_options(o));
  std::vector<std::uint64_t> sent(o.ranks, 0);
  std::int64_t wrong_total = 0;
  for (const std::int64_t b : sweep(o)) {
    FusedCase c = make_fused_case(o, b);
    Row row;
    row.bytes = c.bytes;
    row.shape = c.shape;
    const int calls = calls_per_size(o);
    double* slot[] = {&row.seconds, &row.up_seconds, &row.out_seconds};
    const fc::Mode modes[] = {fc::Mode::unfused, fc::Mode::scale_up, fc::Mode::scale_out};
    for (int m = 0; m < 3; ++m) {
      (void)wire_per_rank(world, sent, 1);
      *slot[m] = time_calls(
          world, [&](fc::Communicator& comm) { c.call(comm, modes[m]); }, o.warmup, o.iters);
      const double wire = wire_per_rank(world, sent, calls);
      if (modes[m] == fc::Mode::scale_up) row.wire = wire;
    }
    if (o.check) {
      c.ref();
      std::vector<std::vector<float>> expect;
      for (auto* v : c.outputs()) expect.push_back(*v);
      for (fc::Mode m : modes) {
        for (auto* v : c.outputs()) fc::poison(v->data(), v->size() * 4);
        world.run([&](fc::Communicator& comm) { c.call(comm, m); });
        auto outs = c.outputs();
        for (int r = 0; r < o.ranks; ++r)
          row.wrong += count_wrong(outs[r]->data(), expect[r].data(), outs[r]->size() * 4, 4);
      }
      (void)wire_per_rank(world, sent, 1);
    }
    wrong_total += row.wrong;
    out.row(row);
  }
  return wrong_total;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    Printer out(o);
    out.header();
    const std::int64_t wrong = is_fused(o.op) ? run_fused(o, out) : run_collectives(o, out);
    out.footer();
    if (wrong > 0) {
      std::fprintf(stderr, "fusedcoll-perf: %lld elements differ from ref/\n",
                   static_cast<long long>(wrong));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
