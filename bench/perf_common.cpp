// fusedcoll-perf's backend-independent half (perf_common.hpp): flags, cases, checks, printer.

#include "perf_common.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <type_traits>
#include <variant>

#include "fusedcoll/detail/cli.hpp"
#include "fusedcoll/env.hpp"

namespace perf {
namespace {

const char* const kUsage = R"(usage: fusedcoll-perf <op> [flags]
       mpiexec -n P fusedcoll-perf <op> --backend mpi [flags]
       FUSEDCOLL_GPU_MODE=process mpiexec -n P fusedcoll-perf <op> --backend gpu [flags]
ops:   allreduce alltoall reducescatter allgather broadcast   (collectives)
       embedding gemv gemm                                     (fused vs unfused)
flags: -b BYTES   smallest size (K/M/G suffixes; default 1K, fused ops 64K)
       -e BYTES   largest size (default 64M, embedding and gemm 16M, gemv 1M)
       -f FACTOR  size multiplier per step (default 4)
       -n N       timed iterations per size (default 20; mpi: rounds)
       -w N       warm-up iterations per size (default 5; mpi: rounds)
       --min-time S  more timed iterations past -n until they last S seconds per size
                  and variant (at most 1000 rounds; emu: batches; default 0: -n alone)
       -c 0|1     check every output against ref/ bit for bit (default 1)
       -g P       ranks (default 4; mpi and gpu's process mode: the world size, which -g
                  must equal)
       -C C       compute units per virtual GPU (default 2; mpi: workgroups per rank,
                  default oneTBB's concurrency)
       -o OP      reduction: sum avg min max (default sum)
       --algo direct|ring|chain   AllReduce algorithm (default direct)
       --root R                   Broadcast root (default 0)
       --backend emu|mpi|gpu      where to run (default emu; mpi: one rank per process under
                                  mpiexec, against Open MPI's collective; gpu: the collectives,
                                  P ranks on one GPU, against copy engines / a fold kernel;
                                  with FUSEDCOLL_GPU_MODE=process under mpiexec, one rank per
                                  process, against NCCL or Open MPI's collective, and the fused
                                  ops too; docs/benchmarking.md)
       --compress F               wire format: none fp16 bf16 fp8-e4m3 fp8-e5m2 (default none;
                                  AllReduce, ReduceScatter, AllGather, All-to-All; compression.md)
       --scaling S                auto none tensor block (default auto: fp8 per tensor)
       --block N                  elements per scale with --scaling block (default 256)
       --pow2                     power-of-two scales
       --predivide                -o avg divides before summing
       --overflow saturate|ieee   out-of-range values (default saturate)
       --link-gbps X --link-us Y  emulator link model (default off; emu only)
       --clock wall|virtual       emu: the host's clock (default) or the cost model's virtual
                                  time (docs/simulation.md; default -n 1 -w 0: it is exact)
       --preset NAME|PATH         virtual time's machine: host mi250x h100 or a preset file
                                  (default FUSEDCOLL_PRESET, else host)
       --symmetric                mpi, allreduce / alltoall / embedding / gemm: receive buffers
                                  and outputs in mpi::SymmetricBuffers (peers put into them)
       --csv | --json             machine-readable output
       --csv-file FILE            also append every row to FILE as CSV, the run's settings in
                                  leading columns (a header line when FILE is new or empty)
       --label TEXT               the first column of --csv-file's rows (e.g. the link)
)";

// The shared strict parsers, their InvalidArgument turned into this tool's usage error.
template <class F>
auto parsed(F&& parse) {
  try {
    return parse();
  } catch (const fc::InvalidArgument& e) {
    usage_error(e.what());
  }
}

std::int64_t parse_bytes(const std::string& s, const char* flag) {
  return parsed([&] { return fc::detail::cli::parse_bytes(flag, s); });
}

int parse_int(const std::string& s, const char* flag, int lo, int hi) {
  return parsed([&] { return fc::detail::cli::parse_int(flag, s, lo, hi); });
}

double parse_double(const std::string& s, const char* flag) {
  return parsed([&] { return fc::detail::cli::parse_number(flag, s, 0, 1e300); });
}

/// A byte count, or "-" in a table / nothing in CSV / null in JSON when unmeasured.
std::string wire_text(double wire, Options::Format f) {
  if (wire >= 0) return fc::detail::make_string(static_cast<long long>(std::llround(wire)));
  return f == Options::Format::json ? "null" : f == Options::Format::csv ? "" : "-";
}

}  // namespace

[[noreturn]] void usage_error(const std::string& what) {
  throw fc::InvalidArgument(fc::detail::make_string("fusedcoll-perf: ", what, "\n", kUsage));
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
  bool link_given = false, iters_given = false, warmup_given = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-b") o.min_bytes = parse_bytes(value(), "-b");
    else if (a == "-e") o.max_bytes = parse_bytes(value(), "-e");
    else if (a == "-f") {
      o.factor = parse_double(value(), "-f");
      if (o.factor <= 1) usage_error("-f must be > 1");
    } else if (a == "-n") {
      o.iters = parse_int(value(), "-n", 1, 1000000);
      iters_given = true;
    } else if (a == "-w") {
      o.warmup = parse_int(value(), "-w", 0, 1000000);
      warmup_given = true;
    } else if (a == "--min-time") {
      o.min_time = parse_double(value(), "--min-time");
      if (o.min_time < 0 || o.min_time > 3600)
        usage_error("--min-time must be in [0, 3600] seconds");
    } else if (a == "-c")
      o.check = parse_int(value(), "-c", 0, 1) == 1;
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
      else if (v == "chain") o.algo = fc::AllReduceAlgo::chain;
      else usage_error("--algo '" + v + "' is not direct, ring or chain");
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
      o.scaling = v;
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
    } else if (a == "--link-gbps") {
      o.link_gbps = parse_double(value(), "--link-gbps");
      link_given = true;
    } else if (a == "--link-us") {
      o.link_us = parse_double(value(), "--link-us");
      link_given = true;
    } else if (a == "--clock") {
      o.clock = value();
      if (o.clock != "wall" && o.clock != "virtual")
        usage_error("--clock '" + o.clock + "' is not wall or virtual");
    } else if (a == "--preset") {
      o.preset = value();
    } else if (a == "--symmetric") o.symmetric = true;
    else if (a == "--csv") o.format = Options::Format::csv;
    else if (a == "--json") o.format = Options::Format::json;
    else if (a == "--csv-file") {
      o.csv_file = value();
      if (o.csv_file.empty()) usage_error("--csv-file needs a file name");
    } else if (a == "--label") {
      o.label = value();
      if (o.label.find_first_of(",\"\n\r") != std::string::npos)
        usage_error("--label '" + o.label + "' holds a comma, quote or line break (a CSV field)");
    } else
      usage_error("unknown flag '" + a + "'");
  }
  if (o.min_bytes < 0) o.min_bytes = is_fused(o.op) ? 64 << 10 : 1 << 10;
  // GemvAllReduce keeps the transformer's K = 11008 and grows N with the size: its weights are
  // 2752 x the output, 2.9 GB in all at 1M (N = 65536); 16M would need 46 GB.
  if (o.max_bytes < 0) o.max_bytes = o.op == "gemv" ? 1 << 20 : is_fused(o.op) ? 16 << 20 : 64 << 20;
  if (o.max_bytes < o.min_bytes) usage_error("-e is smaller than -b");
  if (o.clock == "virtual" || !o.preset.empty()) {
    if (o.backend != "emu") usage_error("--clock virtual / --preset: the emulator's (emu only)");
    if (o.clock != "virtual") usage_error("--preset applies to --clock virtual");
    if (link_given)
      usage_error("--link-gbps / --link-us: in virtual time the preset's links apply (edit a "
                  "copy of the preset instead)");
    if (o.min_time > 0)
      usage_error("--min-time: virtual time is exact and deterministic (one call measures it)");
    // Virtual time is exact and deterministic: one call per size measures it.
    if (!iters_given) o.iters = 1;
    if (!warmup_given) o.warmup = 0;
  }
  if (o.backend == "emu") {
    if (o.ranks == 0) o.ranks = 4;
    if (o.compute_units == 0) o.compute_units = 2;
    if (o.root >= o.ranks) usage_error("--root is not a rank");
  } else if (o.backend == "mpi") {
    // The links are real there: a model on top would measure nothing.
    if (link_given)
      usage_error("--link-gbps / --link-us model the emulator's links; they do not apply to "
                  "--backend mpi");
  } else if (o.backend == "gpu") {
    // Process mode (FUSEDCOLL_GPU_MODE=process, under mpiexec): the world size, checked once MPI
    // is up, as for --backend mpi.
    if (fc::env().gpu_mode != fc::Env::GpuMode::process) {
      if (o.ranks == 0) o.ranks = 4;
      if (o.root >= o.ranks) usage_error("--root is not a rank");
    }
    if (link_given)
      usage_error("--link-gbps / --link-us model the emulator's links; they do not apply to "
                  "--backend gpu");
    if (o.min_time > 0)
      usage_error("--min-time: --backend gpu times exactly -n calls (device events)");
    if (o.compute_units != 0)
      usage_error("-C: the GPU backend sizes its grids by occupancy; it does not apply to "
                  "--backend gpu");
    if (is_fused(o.op) && fc::env().gpu_mode != fc::Env::GpuMode::process)
      usage_error("--backend gpu runs the collectives on one GPU's ranks; the fused operators "
                  "run there in process mode (FUSEDCOLL_GPU_MODE=process, under mpiexec), and "
                  "on one GPU's ranks fusedcoll-gpu-bench measures them");
  } else {
    usage_error("--backend '" + o.backend + "' is not emu, mpi or gpu");
  }
  if (o.symmetric && (o.backend != "mpi" || !(o.op == "allreduce" || o.op == "alltoall" ||
                                              o.op == "embedding" || o.op == "gemm")))
    usage_error("--symmetric: only --backend mpi's allreduce, alltoall, embedding and gemm "
                "receive into symmetric buffers (the emulator's memory is all shared)");
  if (!o.label.empty() && o.csv_file.empty()) usage_error("--label names the rows of --csv-file");
  if (o.wire.format != fc::WireFormat::none && (o.op == "broadcast" || is_fused(o.op)))
    usage_error("--compress: " + o.op + " has no compressed wire (AllReduce, ReduceScatter, "
                "AllGather and All-to-All have)");
  fc::check(o.wire);
  return o;
}

bool more_rounds(const Options& o, int done, int at_least, double timed_seconds) {
  if (done < at_least) return true;
  return timed_seconds < o.min_time && done < kMaxTimedRounds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

/// MemAvailable of /proc/meminfo in bytes, or -1 where there is none.
double available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

}  // namespace

void require_memory(const Options& o, double bytes, const std::string& what) {
  const double need = bytes * std::max(1, o.processes_per_host);
  const double available = available_memory();
  if (available < 0 || need <= available) return;
  throw fc::InvalidArgument(fc::detail::make_string(
      "fusedcoll-perf ", o.op, ": ", what, " needs at least ", std::llround(need),
      " bytes of host memory (", std::round(need / 1e8) / 10, " GB",
      o.processes_per_host > 1
          ? fc::detail::make_string(": ", o.processes_per_host,
                                    " processes on this host, each building every rank's inputs")
          : std::string(),
      "), but ", std::llround(available), " bytes are available (MemAvailable); use a smaller -e"));
}

std::vector<std::int64_t> sweep(const Options& o) {
  std::vector<std::int64_t> sizes;
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0001;
       b *= o.factor)
    sizes.push_back(static_cast<std::int64_t>(b));
  return sizes;
}

double Errors::rms() const { return n ? std::sqrt(sq / static_cast<double>(n)) : 0; }

void Errors::add(const float* got, const float* expect, const float* exact, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    if (std::memcmp(got + i, expect + i, sizeof(float)) != 0) ++wrong;
  if (exact == nullptr) return;
  for (std::size_t i = 0; i < count; ++i) {
    const double d = std::abs(double(got[i]) - double(exact[i]));
    max_abs = std::max(max_abs, d);
    if (exact[i] != 0) max_rel = std::max(max_rel, d / std::abs(double(exact[i])));
    sq += d * d;
  }
  n += static_cast<std::int64_t>(count);
}

// ---------------------------------------------------------------------------------------------
// Output

Printer::Printer(const Options& o, int ranks, std::string setup, std::string baseline)
    : o_(o), ranks_(ranks), setup_(std::move(setup)), baseline_(std::move(baseline)) {}

Printer::~Printer() {
  if (file_ != nullptr) std::fclose(file_);
}

namespace {

// The settings that tell one run's rows from another's in a shared --csv-file.
const char* const kFileSettings =
    "label,op,backend,clock,preset,ranks,compute_units,compress,scaling,algo,link_gbps,link_us,"
    "symmetric,";
const char* const kFusedColumns =
    "size,shape,unfused_us,scale_up_us,scale_out_us,up_ratio,out_ratio,wire_bytes,wrong";
// nccl-tests' columns (size, count, type, redop, root, time, algbw, busbw, #wrong) with units.
const char* const kCollectiveColumns =
    "size,count,type,redop,root,time_us,algbw_gbs,busbw_gbs,wire_bytes,wrong,max_abs_err,"
    "max_rel_err,rms_err";
const char* const kBaselineColumns = "base_us,base_algbw_gbs,base_busbw_gbs,ratio,base_wrong";

// The header's word on --min-time: " (more <what> until ...)", or nothing without it.
std::string more_text(const Options& o, const char* what) {
  if (o.min_time <= 0) return "";
  return fc::detail::make_string(" (more ", what, ", up to ", kMaxTimedRounds, ", until ",
                                 o.min_time, " s per variant)");
}

}  // namespace

std::string Printer::file_header(const std::string& op) {
  return is_fused(op)
             ? fc::detail::make_string(kFileSettings, kFusedColumns)
             : fc::detail::make_string(kFileSettings, kCollectiveColumns, ",", kBaselineColumns);
}

void Printer::header() {
  const bool fused = is_fused(o_.op);
  if (!o_.csv_file.empty()) {
    const std::string want = file_header(o_.op);
    std::string first;
    {
      std::ifstream in(o_.csv_file);
      std::getline(in, first);
    }
    if (!first.empty() && first != want)
      throw fc::InvalidArgument(fc::detail::make_string(
          "fusedcoll-perf: --csv-file ", o_.csv_file, " holds other columns (", first,
          "); this run writes ", want, ": use another file"));
    file_ = std::fopen(o_.csv_file.c_str(), "a");
    if (file_ == nullptr)
      throw fc::InvalidArgument(fc::detail::make_string(
          "fusedcoll-perf: cannot append to --csv-file ", o_.csv_file, ": ", std::strerror(errno)));
    if (first.empty()) std::fprintf(file_, "%s\n", want.c_str());
  }
  if (o_.format == Options::Format::json) {
    std::printf("{\"op\":\"%s\",\"ranks\":%d,\"compute_units\":%d,\"backend\":\"%s\","
                "\"compress\":\"%s\",\"link_gbps\":%g,\"link_us\":%g,\"baseline\":\"%s\",\"rows\":[",
                o_.op.c_str(), ranks_, o_.compute_units, o_.backend.c_str(), o_.compress.c_str(),
                o_.link_gbps, o_.link_us, has_baseline() ? baseline_.c_str() : "");
    return;
  }
  if (o_.format == Options::Format::csv) {
    if (fused)
      std::puts("size,shape,unfused_us,scale_up_us,scale_out_us,up_ratio,out_ratio,wire_bytes,"
                "wrong");
    else
      std::printf("size,count,type,redop,root,time_us,algbw_gbs,busbw_gbs,wire_bytes,wrong,"
                  "max_abs_err,max_rel_err,rms_err%s\n",
                  has_baseline() ? ",base_us,base_algbw_gbs,base_busbw_gbs,ratio,base_wrong" : "");
    return;
  }
  std::printf("# fusedcoll-perf %s: %d ranks, %s, backend %s, compress %s, link %s\n",
              o_.op.c_str(), ranks_, setup_.c_str(), o_.backend.c_str(), o_.compress.c_str(),
              o_.clock == "virtual" ? "the preset's"
              : o_.link_gbps > 0 || o_.link_us > 0
                  ? fc::detail::make_string(o_.link_gbps, " GB/s + ", o_.link_us, " us").c_str()
                  : "off");
  if (o_.backend == "gpu")
    std::printf("# %d warm-up + %d timed calls per size; time = median device time per call "
                "(events; fusedcoll's host arguments are uploaded and downloaded untimed); wire "
                "not measured on gpu\n",
                o_.warmup, o_.iters);
  else if (o_.backend == "mpi")
    std::printf(
        "# %d warm-up + %d timed rounds per size%s, variants shuffled per round; time = "
        "median per call (barrier, clock, call, barrier, clock); wire not measured on "
        "mpi\n",
        o_.warmup, o_.iters, more_text(o_, "rounds").c_str());
  else if (o_.clock == "virtual")
    std::printf("# predicted: %d warm-up + %d timed calls per size in virtual time; time = from "
                "the barrier before a call to its latest rank's end (docs/simulation.md)\n",
                o_.warmup, o_.iters);
  else
    std::printf("# %d warm-up + %d timed iterations per size%s; time = median over batches\n",
                o_.warmup, o_.iters, more_text(o_, "batches").c_str());
  if (has_baseline() && o_.backend == "gpu")
    std::printf("# base = %s on the same device, on device-resident copies of the inputs%s; "
                "fc/base = fusedcoll time / base time (below 1: fusedcoll faster)\n",
                baseline_.c_str(),
                lossy() ? fc::detail::make_string(", uncompressed (fusedcoll's wire is ",
                                                  o_.compress, ")")
                              .c_str()
                        : "");
  else if (has_baseline())
    std::printf("# ompi = Open MPI's %s on the same buffers%s; fc/ompi = fusedcoll time / ompi "
                "time (below 1: fusedcoll faster)\n",
                baseline_.c_str(),
                lossy() ? fc::detail::make_string(", uncompressed (fusedcoll's wire is ",
                                                  o_.compress, ")")
                              .c_str()
                        : "");
  if (fused)
    std::printf("%12s  %-34s %11s %11s %11s %8s %8s %12s %7s\n", "size(B)", "shape", "unfused(us)",
                "scale_up", "scale_out", "up/unf", "out/unf", "wire(B)", "#wrong");
  else
    std::printf("%12s %12s %6s %6s %5s %11s %9s %9s %12s %7s%s%s\n", "size(B)", "count", "type",
                "redop", "root", "time(us)", "algbw", "busbw", "wire(B)", "#wrong",
                lossy() ? "    max|err|    max rel        rms" : "",
                !has_baseline()        ? ""
                : o_.backend == "gpu" ? "    base(us)     algbw     busbw  fc/base  #wrong"
                                      : "    ompi(us)     algbw     busbw  fc/ompi  #wrong");
}

void Printer::row(const Row& r) {
  const bool fused = is_fused(o_.op);
  const auto bw = [&r](double seconds) { return seconds > 0 ? r.bytes / seconds / 1e9 : 0.0; };
  const double algbw = bw(r.seconds), busbw = algbw * r.busbw_factor;
  const double base_algbw = bw(r.base_seconds), base_busbw = base_algbw * r.busbw_factor;
  const double ratio = r.base_seconds > 0 ? r.seconds / r.base_seconds : 0;
  const char* redop =
      o_.op == "allreduce" || o_.op == "reducescatter" ? fc::to_string(o_.redop) : "none";
  const int root = o_.op == "broadcast" ? o_.root : -1;
  const std::string wire = wire_text(r.wire, o_.format);
  const auto ll = [](std::int64_t v) { return static_cast<long long>(v); };
  if (file_ != nullptr) {
    const std::string file_wire = wire_text(r.wire, Options::Format::csv);
    std::fprintf(file_, "%s,%s,%s,%s,%s,%d,%d,%s,%s,%s,%g,%g,%d,", o_.label.c_str(), o_.op.c_str(),
                 o_.backend.c_str(), o_.clock.c_str(),
                 o_.clock == "virtual" && o_.preset.empty() ? "default" : o_.preset.c_str(), ranks_,
                 o_.compute_units, o_.compress.c_str(), o_.scaling.c_str(), fc::to_string(o_.algo),
                 o_.link_gbps, o_.link_us, o_.symmetric ? 1 : 0);
    if (fused)
      std::fprintf(file_, "%lld,%s,%.3f,%.3f,%.3f,%.4f,%.4f,%s,%lld\n", ll(r.bytes),
                   r.shape.c_str(), r.seconds * 1e6, r.up_seconds * 1e6, r.out_seconds * 1e6,
                   r.up_seconds / r.seconds, r.out_seconds / r.seconds, file_wire.c_str(),
                   ll(r.err.wrong));
    else if (has_baseline())
      std::fprintf(file_,
                   "%lld,%lld,float,%s,%d,%.3f,%.4f,%.4f,%s,%lld,%.6g,%.6g,%.6g,%.3f,%.4f,"
                   "%.4f,%.4f,%lld\n",
                   ll(r.bytes), ll(r.count), redop, root, r.seconds * 1e6, algbw, busbw,
                   file_wire.c_str(), ll(r.err.wrong), r.err.max_abs, r.err.max_rel, r.err.rms(),
                   r.base_seconds * 1e6, base_algbw, base_busbw, ratio, ll(r.base_wrong));
    else
      std::fprintf(file_, "%lld,%lld,float,%s,%d,%.3f,%.4f,%.4f,%s,%lld,%.6g,%.6g,%.6g,,,,,\n",
                   ll(r.bytes), ll(r.count), redop, root, r.seconds * 1e6, algbw, busbw,
                   file_wire.c_str(), ll(r.err.wrong), r.err.max_abs, r.err.max_rel, r.err.rms());
    std::fflush(file_);
  }
  if (o_.format == Options::Format::json) {
    if (fused)
      std::printf("%s\n{\"size\":%lld,\"shape\":\"%s\",\"unfused_us\":%.3f,\"scale_up_us\":%.3f,"
                  "\"scale_out_us\":%.3f,\"wire_bytes\":%s,\"wrong\":%lld}",
                  first_ ? "" : ",", ll(r.bytes), r.shape.c_str(), r.seconds * 1e6,
                  r.up_seconds * 1e6, r.out_seconds * 1e6, wire.c_str(), ll(r.err.wrong));
    else {
      std::printf("%s\n{\"size\":%lld,\"count\":%lld,\"type\":\"float\",\"redop\":\"%s\","
                  "\"root\":%d,\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
                  "\"wire_bytes\":%s,\"wrong\":%lld,\"max_abs_err\":%.6g,"
                  "\"max_rel_err\":%.6g,\"rms_err\":%.6g",
                  first_ ? "" : ",", ll(r.bytes), ll(r.count), redop, root, r.seconds * 1e6,
                  algbw, busbw, wire.c_str(), ll(r.err.wrong), r.err.max_abs, r.err.max_rel,
                  r.err.rms());
      if (has_baseline())
        std::printf(",\"base_us\":%.3f,\"base_algbw_gbs\":%.4f,\"base_busbw_gbs\":%.4f,"
                    "\"ratio\":%.4f,\"base_wrong\":%lld",
                    r.base_seconds * 1e6, base_algbw, base_busbw, ratio, ll(r.base_wrong));
      std::printf("}");
    }
    first_ = false;
  } else if (o_.format == Options::Format::csv) {
    if (fused)
      std::printf("%lld,%s,%.3f,%.3f,%.3f,%.4f,%.4f,%s,%lld\n", ll(r.bytes), r.shape.c_str(),
                  r.seconds * 1e6, r.up_seconds * 1e6, r.out_seconds * 1e6,
                  r.up_seconds / r.seconds, r.out_seconds / r.seconds, wire.c_str(),
                  ll(r.err.wrong));
    else {
      std::printf("%lld,%lld,float,%s,%d,%.3f,%.4f,%.4f,%s,%lld,%.6g,%.6g,%.6g", ll(r.bytes),
                  ll(r.count), redop, root, r.seconds * 1e6, algbw, busbw, wire.c_str(),
                  ll(r.err.wrong), r.err.max_abs, r.err.max_rel, r.err.rms());
      if (has_baseline())
        std::printf(",%.3f,%.4f,%.4f,%.4f,%lld", r.base_seconds * 1e6, base_algbw, base_busbw,
                    ratio, ll(r.base_wrong));
      std::printf("\n");
    }
  } else if (fused) {
    std::printf("%12lld  %-34s %11.1f %11.1f %11.1f %8.3f %8.3f %12s %7lld\n", ll(r.bytes),
                r.shape.c_str(), r.seconds * 1e6, r.up_seconds * 1e6, r.out_seconds * 1e6,
                r.up_seconds / r.seconds, r.out_seconds / r.seconds, wire.c_str(),
                ll(r.err.wrong));
  } else {
    std::printf("%12lld %12lld %6s %6s %5d %11.1f %9.3f %9.3f %12s %7lld", ll(r.bytes),
                ll(r.count), "float", redop, root, r.seconds * 1e6, algbw, busbw, wire.c_str(),
                ll(r.err.wrong));
    if (lossy()) std::printf(" %11.3e %10.3e %10.3e", r.err.max_abs, r.err.max_rel, r.err.rms());
    if (has_baseline())
      std::printf(" %11.1f %9.3f %9.3f %8.3f %7lld", r.base_seconds * 1e6, base_algbw, base_busbw,
                  ratio, ll(r.base_wrong));
    std::printf("\n");
  }
  std::fflush(stdout);
}

void Printer::footer() {
  if (o_.format == Options::Format::json) std::puts("\n]}");
  if (file_ != nullptr) {
    const bool failed = std::ferror(file_) != 0;
    std::fclose(file_);
    file_ = nullptr;
    if (failed)
      throw fc::InvalidArgument("fusedcoll-perf: writing --csv-file " + o_.csv_file + " failed");
  }
}

// ---------------------------------------------------------------------------------------------
// Collectives

namespace {

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

}  // namespace

std::int64_t collective_bytes(std::int64_t b, int ranks) {
  const std::int64_t unit = 4LL * ranks;
  return std::max<std::int64_t>(unit, b / unit * unit);
}

std::unique_ptr<CollectiveCase> make_collective(const Options& o, int ranks, std::int64_t bytes,
                                                fc::ValueMode values) {
  const int P = ranks;
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
  c.pieces = pieces;
  c.per_peer = per_peer;
  // One rank's arguments, reading `send`, writing into `recv`, with wire options `wire`
  // (Broadcast has none).
  std::function<AnyArgs(const float*, float*, const fc::CompressionOptions&)> args;
  if (o.op == "allreduce") {
    c.busbw_factor = 2 * nm1;
    args = [&o, &c](const float* send, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      fc::AllReduceArgs a;
      a.send = send;
      a.recv = recv;
      a.count = c.count;
      a.op = o.redop;
      a.algo = o.algo;
      a.wire = wire;
      return a;
    };
  } else if (o.op == "reducescatter") {
    args = [&o, pieces](const float* send, float* recv,
                        const fc::CompressionOptions& wire) -> AnyArgs {
      return fc::ReduceScatterArgs{send, recv, pieces, fc::DType::f32, o.redop, wire};
    };
  } else if (o.op == "allgather") {
    args = [pieces](const float* send, float* recv, const fc::CompressionOptions& wire) -> AnyArgs {
      return fc::AllGatherArgs{send, recv, pieces, fc::DType::f32, wire};
    };
  } else if (o.op == "alltoall") {
    send_elems = recv_elems = c.count = per_peer * P;
    args = [per_peer, P](const float* send, float* recv,
                         const fc::CompressionOptions& wire) -> AnyArgs {
      auto a = fc::make_alltoall(send, recv, per_peer, fc::DType::f32, P);
      a.wire = wire;
      return a;
    };
  } else {  // broadcast
    c.busbw_factor = 1;
    args = [&o, &c](const float* send, float* recv, const fc::CompressionOptions&) -> AnyArgs {
      return fc::BroadcastArgs{send, recv, c.count, fc::DType::f32, o.root};
    };
  }
  c.bytes = c.count * 4;
  c.requested = bytes;
  {
    // Every rank's buffers; the check's expected outputs (and, lossy, the exact ones); the
    // baselines' check, a second case on integer inputs with its expected outputs.
    double send_total = 0, recv_total = 0;
    for (int r = 0; r < P; ++r) {
      send_total += static_cast<double>(o.op == "allgather" ? pieces[r] : send_elems);
      recv_total += static_cast<double>(o.op == "reducescatter" ? pieces[r] : recv_elems);
    }
    double floats = send_total + recv_total;
    if (o.check) floats += recv_total * (o.wire.format != fc::WireFormat::none ? 2 : 1);
    if (o.check && o.backend != "emu") floats += send_total + 2 * recv_total;
    require_memory(o, 4 * floats,
                   fc::detail::make_string("size ", c.bytes, " on ", P, " ranks (every rank's "
                                           "buffers and the check's copies)"));
  }
  c.send.resize(P);
  c.recv.resize(P);
  for (int r = 0; r < P; ++r) {
    const std::int64_t s = o.op == "allgather" ? pieces[r] : send_elems;
    const std::int64_t d = o.op == "reducescatter" ? pieces[r] : recv_elems;
    c.send[r].resize(s);
    c.recv[r].resize(d);
    fc::fill_values(c.send[r].data(), s, fc::DType::f32, 2024, 1, r, values);
  }
  c.call_into = [&o, &c, args](fc::Communicator& comm, float* recv) {
    std::visit([&](const auto& a) { run_on(comm, a); },
               args(c.send[comm.rank()].data(), recv, o.wire));
  };
  c.args_at = [&o, args, P](const std::vector<const float*>& send,
                            const std::vector<float*>& recv) {
    std::vector<AnyArgs> all;
    for (int r = 0; r < P; ++r) all.push_back(args(send[r], recv[r], o.wire));
    return all;
  };
  c.call = [&c](fc::Communicator& comm) { c.call_into(comm, c.recv[comm.rank()].data()); };
  c.ref = [&c, args, P](const fc::CompressionOptions& wire, std::vector<std::vector<float>>& out) {
    out.resize(P);
    std::vector<AnyArgs> all;
    for (int r = 0; r < P; ++r) {
      out[r].assign(c.recv[r].size(), 0.0f);
      all.push_back(args(c.send[r].data(), out[r].data(), wire));
    }
    std::visit([&](const auto& first) { ref_on(first, all); }, all[0]);
  };
  return holder;
}

void prepare_check(CollectiveCase& c, const Options& o,
                   std::vector<std::vector<float>>& expect,
                   std::vector<std::vector<float>>& exact) {
  c.ref(o.wire, expect);
  exact.clear();
  // What compression costs: the result against the same collective without it.
  if (o.wire.format != fc::WireFormat::none) c.ref(fc::CompressionOptions{}, exact);
  for (auto& r : c.recv) fc::poison(r.data(), r.size() * 4);
}

void check_rank(const CollectiveCase& c, int r, const std::vector<std::vector<float>>& expect,
                const std::vector<std::vector<float>>& exact, Errors& err) {
  err.add(c.recv[r].data(), expect[r].data(), exact.empty() ? nullptr : exact[r].data(),
          c.recv[r].size());
}

Errors check_collective(CollectiveCase& c, const Options& o, const std::function<void()>& run,
                        int me) {
  std::vector<std::vector<float>> expect, exact;
  prepare_check(c, o, expect, exact);
  run();
  Errors err;
  for (int r = 0; r < static_cast<int>(c.recv.size()); ++r)
    if (me < 0 || r == me) check_rank(c, r, expect, exact, err);
  return err;
}

Errors check_baseline(const CollectiveCase& c, const Options& o, int ranks,
                      const std::function<void(CollectiveCase&)>& run, int me) {
  const auto ints = make_collective(o, ranks, c.requested, fc::ValueMode::integer);
  Options plain = o;
  plain.wire = fc::CompressionOptions{};
  return check_collective(*ints, plain, [&] { run(*ints); }, me);
}

// ---------------------------------------------------------------------------------------------
// Fused operators

namespace {

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
  using Args = typename decltype(fc::args_of(*world))::value_type;
  if constexpr (requires(Args a) { a.output; }) {
    c.call_into = [args, call_fn](fc::Communicator& comm, fc::Mode m, float* out) {
      Args a = (*args)[static_cast<std::size_t>(comm.rank())];
      const fc::TensorView& v = a.output;
      std::vector<std::int64_t> dims;
      for (int d = 0; d < v.rank(); ++d) dims.push_back(v.size(d));
      a.output = fc::TensorView(out, v.dtype(), dims);
      call_fn(comm, a, m);
    };
  }
  c.ref = [args, ref_fn] { ref_fn(*args); };
  for (auto* v : c.outputs()) c.bytes = std::max<std::int64_t>(c.bytes, v->size() * 4);
  return c;
}

}  // namespace

FusedCase make_fused_case(const Options& o, int ranks, std::int64_t bytes) {
  const int P = ranks;
  if (o.op == "embedding") {
    auto p = fc::EmbeddingProblem::dlrm(P);
    // Output per rank: batch x T x D floats.
    const std::int64_t per_sample = p.num_tables() * p.dim * 4;
    p.batch_sizes.assign(P, std::max<std::int64_t>(1, bytes / per_sample));
    // Tables, every table's bags over the global batch (indices at most max_bag per sample, and
    // offsets), and the outputs, twice when checked (ref/'s copy).
    double rows = 0;
    for (auto r : p.table_rows) rows += static_cast<double>(r);
    const double samples = static_cast<double>(p.global_batch());
    const double tables = static_cast<double>(p.num_tables());
    const double dim = static_cast<double>(p.dim);
    require_memory(o,
                   4 * rows * dim + 8 * tables * samples * static_cast<double>(p.max_bag + 1) +
                       4 * samples * tables * dim * (o.check ? 2 : 1),
                   fc::detail::make_string("size ", bytes, " (T=", p.num_tables(), " D=", p.dim,
                                           " B=", p.global_batch(), ")"));
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
    // W (N x K) and x (M x K) split over the ranks, each rank's y (M x N), twice when checked.
    const double m_ = static_cast<double>(p.m), n_ = static_cast<double>(p.n);
    const double k_ = static_cast<double>(p.k());
    require_memory(o, 4 * (n_ * k_ + m_ * k_ + P * m_ * n_ * (o.check ? 2 : 1)),
                   fc::detail::make_string("size ", bytes, " (M=", p.m, " N=", p.n, " K=", p.k(),
                                           ": every rank's weights, inputs and outputs)"));
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
  // Every expert's weights (K x N) and routed rows (K each), the outputs (N per row), twice when
  // checked.
  const double e_ = static_cast<double>(p.num_experts()), rows_ = static_cast<double>(total);
  const double k_ = static_cast<double>(p.k), n_ = static_cast<double>(p.n);
  require_memory(o, 4 * (e_ * k_ * n_ + rows_ * k_ + rows_ * n_ * (o.check ? 2 : 1)),
                 fc::detail::make_string("size ", bytes, " (E=", p.num_experts(), " K=", p.k,
                                         " N=", p.n, " rows=", total, ")"));
  return make_fused(
      fc::detail::make_string("E=", p.num_experts(), " K=", p.k, " N=", p.n, " rows=", total), p,
      [](std::vector<fc::GemmAllToAllArgs>& a) { fc::ref::gemm_alltoall(a); },
      [](fc::Communicator& c, const fc::GemmAllToAllArgs& a, fc::Mode m) {
        fc::gemm_alltoall(c, a, m);
      },
      [](fc::GemmRankData& d) -> std::vector<float>& { return d.output; });
}

std::vector<std::vector<float>> fused_expected(const FusedCase& c) {
  c.ref();
  std::vector<std::vector<float>> expect;
  for (auto* v : c.outputs()) expect.push_back(*v);
  return expect;
}

// ---------------------------------------------------------------------------------------------
// Sweeps

std::int64_t collective_sweep(const Options& o, int ranks, Printer& out, bool print,
                              const std::function<void(CollectiveCase&, Row&)>& measure) {
  std::int64_t wrong = 0;
  for (const std::int64_t b : sweep(o)) {
    const auto holder = make_collective(o, ranks, collective_bytes(b, ranks));
    CollectiveCase& c = *holder;
    Row row;
    row.bytes = c.bytes;
    row.count = c.count;
    row.busbw_factor = c.busbw_factor;
    measure(c, row);
    wrong += row.err.wrong + row.base_wrong;
    if (print) out.row(row);
  }
  return wrong;
}

std::int64_t fused_sweep(const Options& o, int ranks, Printer& out, bool print,
                         const std::function<void(FusedCase&, Row&)>& measure) {
  std::int64_t wrong = 0;
  for (const std::int64_t b : sweep(o)) {
    FusedCase c = make_fused_case(o, ranks, b);
    Row row;
    row.bytes = c.bytes;
    row.shape = c.shape;
    measure(c, row);
    wrong += row.err.wrong;
    if (print) out.row(row);
  }
  return wrong;
}

}  // namespace perf
