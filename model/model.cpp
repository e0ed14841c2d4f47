// The cost model (include/fusedcoll/model.hpp): kernel work, roofline costs, and the preset files.

#include "fusedcoll/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "fusedcoll/error.hpp"
#include "model/builtin.hpp"

namespace fusedcoll::model {

const char* to_string(PeerTopology t) noexcept {
  switch (t) {
    case PeerTopology::mesh:
      return "mesh";
    case PeerTopology::switched:
      return "switched";
    case PeerTopology::shared:
      return "shared";
  }
  return "?";
}

const char* to_string(Kernel k) noexcept {
  switch (k) {
    case Kernel::gemm:
      return "gemm";
    case Kernel::gemv:
      return "gemv";
    case Kernel::embedding:
      return "embedding";
    case Kernel::reduce:
      return "reduce";
    case Kernel::copy:
      return "copy";
    case Kernel::encode_f16:
      return "encode_f16";
    case Kernel::decode_f16:
      return "decode_f16";
    case Kernel::encode_bf16:
      return "encode_bf16";
    case Kernel::decode_bf16:
      return "decode_bf16";
    case Kernel::encode_fp8:
      return "encode_fp8";
    case Kernel::decode_fp8:
      return "decode_fp8";
    case Kernel::amax:
      return "amax";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Work

namespace {

/// Preset errors are the user's input: the message alone, no source location.
template <class... Args>
void require(bool ok, const Args&... what) {
  if (!ok) throw InvalidArgument(detail::make_string(what...));
}

double d(std::int64_t v) { return static_cast<double>(v); }

// Vector operations per element of each codec, counted from core/codec.cpp's vector paths: f16
// encode converts and clamps, bf16 encode rounds to nearest even with integer adds, shifts and a
// NaN test, fp8 rebuilds exponent and mantissa with integer operations both ways. The counts fix
// the ratio between the codecs on a device whose rate is its f32 rate; a measured preset (host)
// corrects them through its efficiencies.
struct CodecCost {
  Kernel encode, decode;
  double encode_ops, decode_ops;
};

CodecCost codec_cost(WireFormat f) {
  switch (f) {
    case WireFormat::f16:
      return {Kernel::encode_f16, Kernel::decode_f16, 2, 1};
    case WireFormat::bf16:
      return {Kernel::encode_bf16, Kernel::decode_bf16, 4, 1};
    case WireFormat::fp8_e4m3:
    case WireFormat::fp8_e5m2:
      return {Kernel::encode_fp8, Kernel::decode_fp8, 12, 10};
    case WireFormat::none:
      break;
  }
  require(false, "no codec for wire format ", to_string(f));
  return {};
}

}  // namespace

Work gemm(std::int64_t rows, std::int64_t cols, std::int64_t k, bool first_touch) {
  return {Kernel::gemm,
          2 * d(rows) * d(cols) * d(k),
          4 * (d(rows) * d(k) + d(k) * d(cols) + d(rows) * d(cols)),
          rows,
          cols,
          k,
          first_touch};
}

Work gemv(std::int64_t m, std::int64_t k, std::int64_t n) {
  return {Kernel::gemv, 2 * d(m) * d(n) * d(k), 4 * (d(n) * d(k) + d(m) * d(k) + d(m) * d(n))};
}

Work embedding(std::int64_t rows, std::int64_t bags, std::int64_t dim, int index_bytes,
               bool weighted) {
  return {Kernel::embedding, d(rows) * d(dim) * (weighted ? 2 : 1),
          4 * d(rows) * d(dim) + 4 * d(bags) * d(dim) + index_bytes * (d(rows) + d(bags) + 1) +
              (weighted ? 4 * d(rows) : 0)};
}

Work reduce(std::int64_t count, std::int64_t elem_bytes) {
  return {Kernel::reduce, d(count), 3 * d(count) * d(elem_bytes)};
}

Work copy(std::int64_t bytes) { return {Kernel::copy, 0, 2 * d(bytes)}; }

Work amax(std::int64_t count) { return {Kernel::amax, d(count), 4 * d(count)}; }

Work encode(WireFormat format, std::int64_t count, bool scaled) {
  if (format == WireFormat::none) return copy(4 * count);
  const CodecCost c = codec_cost(format);
  return {c.encode, d(count) * (c.encode_ops + (scaled ? 1 : 0)),
          d(count) * d(4 + static_cast<std::int64_t>(wire_size(format)))};
}

Work decode(WireFormat format, std::int64_t count, bool scaled) {
  if (format == WireFormat::none) return copy(4 * count);
  const CodecCost c = codec_cost(format);
  return {c.decode, d(count) * (c.decode_ops + (scaled ? 1 : 0)),
          d(count) * d(4 + static_cast<std::int64_t>(wire_size(format)))};
}

std::array<Work, 3> wire_reduce(WireFormat format, std::int64_t count, bool scaled, int wire,
                                int round_trip, int plain, bool encode_result, bool decode_result) {
  require(wire >= 0 && round_trip >= 0 && plain >= 0 && wire + round_trip + plain > 0,
          "wire_reduce: bad source counts");
  const CodecCost c = codec_cost(format);
  const double n = d(count), w = d(static_cast<std::int64_t>(wire_size(format)));
  const double s = scaled ? 1 : 0, out = encode_result ? 1 : 0;
  const double dec = encode_result && decode_result ? 1 : 0;
  return {Work{c.encode, n * (c.encode_ops + s) * (round_trip + out), n * (4 * round_trip + w * out)},
          Work{c.decode, n * (c.decode_ops + s) * (wire + round_trip + dec), n * (w * wire + 4 * dec)},
          Work{Kernel::reduce, n * (wire + round_trip + plain - 1), n * 4 * (plain + 1 - out)}};
}

double seconds(const Preset& p, const Work& w) {
  const double rate = p.device.cu_gflops * 1e9;
  const double bandwidth = p.device.memory_gbps * 1e9 / p.device.compute_units;
  const int block = p.device.gemm_pack_rows;
  if (w.kernel == Kernel::gemm && block > 0 && w.rows > 0 && w.cols > 0 && w.k > 0) {
    // gemm_tile packs B's panel before any arithmetic, and its micro-kernel computes whole
    // blocks of rows: a partial tile costs nearly a whole one (measured: 8 rows of a 16 x 64,
    // K = 1024 tile take 0.73 of its time, 1 row 0.78; docs/results/virtual-time.md).
    const double padded = d((w.rows + block - 1) / block * block);
    const double panel = copy(w.k * w.cols * 4).bytes;
    const double pack = w.first_touch && p.device.gemm_cold_gbps > 0
                            ? panel / (p.device.gemm_cold_gbps * 1e9)
                            : panel / bandwidth / p.efficiency_of(Kernel::copy);
    return pack + 2 * padded * d(w.cols) * d(w.k) / rate / p.efficiency_of(Kernel::gemm);
  }
  return std::max(w.flops / rate, w.bytes / bandwidth) / p.efficiency_of(w.kernel);
}

double load_round_bytes(Kernel k) {
  const bool scalar = k == Kernel::gemm || k == Kernel::gemv || k == Kernel::embedding;
  return kWorkgroupThreads * (scalar ? 4.0 : 16.0);
}

double latency_seconds(const Preset& p, const Work& w) {
  if (!(p.device.load_latency_us > 0)) return 0;
  return w.bytes / load_round_bytes(w.kernel) * p.device.load_latency_us * 1e-6;
}

double handover_seconds(const Preset& p) { return p.device.handover_us * 1e-6; }

bool shares_node_memory(const Preset& p) {
  return p.device.node_memory_gbps < p.links.gpus_per_node * p.device.memory_gbps;
}

double node_memory_seconds(const Preset& p, const Work& w) {
  return w.bytes / (p.device.node_memory_gbps * 1e9 * p.efficiency_of(w.kernel));
}

bool in_cache(const Preset& p, double working_set, int node_share) {
  return p.device.cache_mib > 0 && working_set > 0 &&
         working_set * std::max(1, node_share) <= p.device.cache_mib * double(1 << 20);
}

double cache_seconds(const Preset& p, const Work& w) {
  if (w.kernel == Kernel::gemm && p.device.gemm_pack_rows > 0) {
    // The kernel's weights stayed in the cache since the previous call: a first tile packs its
    // panel as every later tile does (docs/simulation.md, "A working set in the cache").
    Work warm = w;
    warm.first_touch = false;
    return seconds(p, warm);
  }
  const double rate = p.device.cu_gflops * 1e9;
  const double bandwidth = p.device.cache_gbps * 1e9 / p.device.compute_units;
  // With no memory to wait for, a codec is bound by its instructions: the fused wire_reduce
  // counts only the bytes that reach memory, and an efficiency against bytes would price its
  // decode, fold and encode at nothing (docs/simulation.md, "A working set in the cache").
  if (const double ops = p.in_cache_of(w.kernel); ops > 0)
    return std::max(w.flops / (rate * ops), w.bytes / bandwidth);
  return std::max(w.flops / rate, w.bytes / bandwidth) / p.efficiency_of(w.kernel);
}

double span_seconds(const Preset& p, std::span<const Work> works, int node_share,
                    double working_set) {
  double unit = 0, node = 0;
  if (in_cache(p, working_set, node_share)) {
    for (const Work& w : works) unit += cache_seconds(p, w);
    return unit;
  }
  for (const Work& w : works) {
    unit += seconds(p, w);
    node += node_memory_seconds(p, w);
  }
  return node_share > 0 ? std::max(unit, node * node_share) : unit;
}

double device_seconds(const Preset& p, const Work& w) {
  const double rate = p.device.cu_gflops * 1e9 * p.device.compute_units;
  const double bandwidth = p.device.memory_gbps * 1e9;
  return launch_seconds(p) + std::max(w.flops / rate, w.bytes / bandwidth) / p.efficiency_of(w.kernel);
}

double peer_seconds(const Preset& p, std::int64_t bytes) {
  if (p.links.peer_topology == PeerTopology::shared)
    return node_memory_seconds(p, copy(bytes));
  return d(bytes) / (p.links.peer_gbps * 1e9);
}

double transfer_seconds(const Preset& p, int src, int dst, std::int64_t bytes) {
  if (src == dst) return 0;
  if (p.links.same_node(src, dst)) return p.links.peer_us * 1e-6 + peer_seconds(p, bytes);
  return p.links.nic_us * 1e-6 + d(bytes) / (p.links.nic_gbps * 1e9);
}

double issue_seconds(const Preset& p, int src, int dst) {
  return src == dst ? 0.0 : p.links.put_us * 1e-6;
}

double nic_cpu_seconds(const Preset& p, int src, int dst, std::int64_t bytes) {
  if (src == dst || p.links.same_node(src, dst) || !(p.links.nic_cpu_gbps > 0)) return 0;
  return d(bytes) / (p.links.nic_cpu_gbps * 1e9);
}

// ---------------------------------------------------------------------------------------------
// Preset files
//
//   name = mi250x           # top level: the name
//   [device]                # then sections of `key = value`; '#' starts a comment
//   compute_units = 110
//
// Every field below is required exactly once; anything else is an error naming it.

namespace {

enum class Type { integer, number, topology, name };

struct Field {
  const char* section;  // "" for the top level
  const char* key;
  Type type;
  double lo, hi;
  bool lo_open;  // lo itself is not allowed
  const char* unit;
  bool optional = false;  // may be left out: then the struct's default (documented) holds
};

// The efficiency fields come after these, one per Kernel.
constexpr Field kFields[] = {
    {"", "name", Type::name, 0, 0, false, ""},
    {"device", "compute_units", Type::integer, 1, 4096, false, ""},
    {"device", "resident_wgs_per_cu", Type::integer, 1, 64, false, ""},
    {"device", "cu_gflops", Type::number, 0, 1e6, true, "GFLOP/s"},
    {"device", "memory_gbps", Type::number, 0, 1e6, true, "GB/s"},
    {"device", "launch_us", Type::number, 0, 1e6, false, "us"},
    {"device", "node_memory_gbps", Type::number, 0, 1e6, true, "GB/s"},
    {"device", "gemm_pack_rows", Type::integer, 0, 64, false, "", true},
    {"device", "gemm_cold_gbps", Type::number, 0, 1e6, false, "GB/s", true},
    {"device", "load_latency_us", Type::number, 0, 1e6, false, "us", true},
    {"device", "handover_us", Type::number, 0, 1e6, false, "us", true},
    {"device", "cache_mib", Type::number, 0, 1e6, false, "MiB", true},
    {"device", "cache_gbps", Type::number, 0, 1e6, false, "GB/s", true},
    {"links", "gpus_per_node", Type::integer, 1, 4096, false, ""},
    {"links", "peer_topology", Type::topology, 0, 0, false, ""},
    {"links", "peer_gbps", Type::number, 0, 1e6, true, "GB/s"},
    {"links", "peer_us", Type::number, 0, 1e6, false, "us"},
    {"links", "nic_gbps", Type::number, 0, 1e6, true, "GB/s"},
    {"links", "nic_us", Type::number, 0, 1e6, false, "us"},
    {"links", "nics_per_node", Type::integer, 1, 4096, false, "", true},
    {"links", "put_us", Type::number, 0, 1e6, false, "us"},
    {"links", "put_cu_share", Type::number, 0, 1, false, ""},
    {"links", "nic_cpu_gbps", Type::number, 0, 1e6, false, "GB/s", true},
};
constexpr int kPlainFields = sizeof(kFields) / sizeof(kFields[0]);
constexpr Field kEfficiency{"efficiency", "", Type::number, 0, 4, true, ""};
// The suffix of an `[efficiency]` key that gives a kernel's `Preset::in_cache`.
constexpr const char* kInCache = "_in_cache";

std::string full_name(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

/// Checks a number against its field's range; `where` prefixes the message.
void check_range(const std::string& where, const std::string& field, double v, const Field& f) {
  const bool low = f.lo_open ? !(v > f.lo) : !(v >= f.lo);
  if (!std::isfinite(v) || low || !(v <= f.hi)) {
    const std::string range =
        f.type == Type::integer
            ? detail::make_string("an integer in [", f.lo, ", ", f.hi, "]")
            : detail::make_string("a number in ", f.lo_open ? "(" : "[", f.lo, ", ", f.hi, "]");
    throw InvalidArgument(detail::make_string(where, field, " = ", v,
                                              " is out of range: it must be ", range,
                                              f.unit[0] ? " " : "", f.unit));
  }
}

/// A cache needs its rate.
void check_cache(const std::string& where, const Device& d) {
  require(!(d.cache_mib > 0) || d.cache_gbps > 0, where, "device.cache_mib = ", d.cache_mib,
          " needs device.cache_gbps, the cache's rate (GB/s, above 0)");
}

/// `links.nics_per_node` (0: one per device) against the node's devices.
void check_nics(const std::string& where, const Links& l) {
  require(l.nics_per_node <= l.gpus_per_node, where, "links.nics_per_node = ", l.nics_per_node,
          " is out of range: it must be at most links.gpus_per_node = ", l.gpus_per_node,
          " (a node's NICs are shared by its devices)");
}

double* number_slot(Preset& p, const std::string& field) {
  if (field == "device.cu_gflops") return &p.device.cu_gflops;
  if (field == "device.memory_gbps") return &p.device.memory_gbps;
  if (field == "device.launch_us") return &p.device.launch_us;
  if (field == "device.node_memory_gbps") return &p.device.node_memory_gbps;
  if (field == "device.gemm_cold_gbps") return &p.device.gemm_cold_gbps;
  if (field == "device.load_latency_us") return &p.device.load_latency_us;
  if (field == "device.handover_us") return &p.device.handover_us;
  if (field == "device.cache_mib") return &p.device.cache_mib;
  if (field == "device.cache_gbps") return &p.device.cache_gbps;
  if (field == "links.put_us") return &p.links.put_us;
  if (field == "links.put_cu_share") return &p.links.put_cu_share;
  if (field == "links.peer_gbps") return &p.links.peer_gbps;
  if (field == "links.peer_us") return &p.links.peer_us;
  if (field == "links.nic_gbps") return &p.links.nic_gbps;
  if (field == "links.nic_us") return &p.links.nic_us;
  if (field == "links.nic_cpu_gbps") return &p.links.nic_cpu_gbps;
  return nullptr;
}

int* integer_slot(Preset& p, const std::string& field) {
  if (field == "device.compute_units") return &p.device.compute_units;
  if (field == "device.resident_wgs_per_cu") return &p.device.resident_wgs_per_cu;
  if (field == "device.gemm_pack_rows") return &p.device.gemm_pack_rows;
  if (field == "links.gpus_per_node") return &p.links.gpus_per_node;
  if (field == "links.nics_per_node") return &p.links.nics_per_node;
  return nullptr;
}

std::string known_fields(const std::string& section) {
  std::string out;
  if (section == "efficiency") {
    for (int k = 0; k < kKernels; ++k)
      out += std::string(k ? ", " : "") + to_string(static_cast<Kernel>(k));
    return out + " (each optionally also as <kernel>" + kInCache + ")";
  }
  for (const Field& f : kFields)
    if (f.section == section) out += std::string(out.empty() ? "" : ", ") + f.key;
  return out;
}

}  // namespace

Preset parse_preset(std::string_view text, const std::string& origin) {
  const std::string where = "preset '" + origin + "': ";
  Preset p;
  p.origin = origin;
  std::map<std::string, int> seen;  // field -> line
  std::string section;
  std::istringstream in{std::string(text)};
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string here = detail::make_string(where, "line ", line, ": ");
    const std::string l = trim(std::string_view(raw).substr(0, raw.find('#')));
    if (l.empty()) continue;
    if (l.front() == '[') {
      require(l.back() == ']', here, "'", l, "' is not a [section]");
      section = trim(std::string_view(l).substr(1, l.size() - 2));
      require(section == "device" || section == "links" || section == "efficiency", here,
              "unknown section [", section,
              "] (the sections are [device], [links], "
              "[efficiency])");
      continue;
    }
    const auto eq = l.find('=');
    require(eq != std::string::npos, here, "'", l, "' is not 'key = value'");
    const std::string key = trim(std::string_view(l).substr(0, eq));
    const std::string value = trim(std::string_view(l).substr(eq + 1));
    const std::string field = full_name(section, key);
    const Field* spec = nullptr;
    for (const Field& f : kFields)
      if (section == f.section && key == f.key) spec = &f;
    int kernel = -1, cached = -1;
    if (section == "efficiency")
      for (int k = 0; k < kKernels; ++k) {
        if (key == to_string(static_cast<Kernel>(k))) kernel = k;
        if (key == std::string(to_string(static_cast<Kernel>(k))) + kInCache) cached = k;
      }
    if (spec == nullptr && kernel < 0 && cached < 0) {
      const std::string known = known_fields(section);
      throw InvalidArgument(detail::make_string(
          here, "unknown field '", field, "'",
          known.empty()
              ? std::string(" (only 'name' precedes the first section)")
              : " (the fields of " +
                    (section.empty() ? std::string("the top level") : "[" + section + "]") + ": " +
                    known + ")"));
    }
    const auto [it, fresh] = seen.emplace(field, line);
    require(fresh, here, "field '", field, "' repeats line ", it->second);
    require(!value.empty(), here, "field '", field, "' has no value");
    const Type type = spec ? spec->type : Type::number;
    if (type == Type::name) {
      require(valid_name(value), here, "name '", value,
              "' must be 1-64 letters, digits, '_', '-' or '.'");
      p.name = value;
    } else if (type == Type::topology) {
      if (value == "mesh")
        p.links.peer_topology = PeerTopology::mesh;
      else if (value == "switched")
        p.links.peer_topology = PeerTopology::switched;
      else if (value == "shared")
        p.links.peer_topology = PeerTopology::shared;
      else
        throw InvalidArgument(detail::make_string(here, "unknown ", field, " '", value,
                                                  "' (mesh, switched or shared)"));
    } else {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      require(end != value.c_str() && *end == '\0', here, field, " = '", value,
              "' is not a number");
      check_range(here, field, v, spec ? *spec : kEfficiency);
      if (type == Type::integer) {
        require(v == std::floor(v), here, field, " = ", value, " is not an integer");
        *integer_slot(p, field) = static_cast<int>(v);
      } else if (kernel >= 0) {
        p.efficiency[kernel] = v;
      } else if (cached >= 0) {
        p.in_cache[cached] = v;
      } else {
        *number_slot(p, field) = v;
      }
    }
  }
  for (const Field& f : kFields) {
    const std::string field = full_name(f.section, f.key);
    require(f.optional || seen.count(field), where, "missing field '", field, "'",
            f.section[0] ? std::string(" (in [") + f.section + "])" : std::string());
  }
  for (int k = 0; k < kKernels; ++k) {
    const std::string field = full_name("efficiency", to_string(static_cast<Kernel>(k)));
    require(seen.count(field), where, "missing field '", field, "' (in [efficiency])");
  }
  check_nics(where, p.links);
  check_cache(where, p.device);
  return p;
}

void validate(const Preset& p) {
  const std::string where = "preset '" + (p.origin.empty() ? p.name : p.origin) + "': ";
  require(valid_name(p.name), where, "name '", p.name,
          "' must be 1-64 letters, digits, '_', '-' or '.'");
  Preset copy = p;
  for (int i = 1; i < kPlainFields; ++i) {
    const Field& f = kFields[i];
    const std::string field = full_name(f.section, f.key);
    if (f.type == Type::integer) {
      const int v = *integer_slot(copy, field);
      if (!(f.optional && f.lo > 0 && v == 0)) check_range(where, field, v, f);  // 0: left out
    } else if (f.type == Type::number)
      check_range(where, field, *number_slot(copy, field), f);
  }
  check_nics(where, p.links);
  check_cache(where, p.device);
  require(p.links.peer_topology == PeerTopology::mesh ||
              p.links.peer_topology == PeerTopology::switched ||
              p.links.peer_topology == PeerTopology::shared,
          where, "links.peer_topology ", static_cast<int>(p.links.peer_topology),
          " is not mesh, switched or shared");
  for (int k = 0; k < kKernels; ++k) {
    const std::string key = to_string(static_cast<Kernel>(k));
    check_range(where, full_name("efficiency", key), p.efficiency[k], kEfficiency);
    if (p.in_cache[k] != 0)  // 0: not measured
      check_range(where, full_name("efficiency", key + kInCache), p.in_cache[k], kEfficiency);
  }
}

std::string to_text(const Preset& p) {
  std::ostringstream out;
  out.precision(17);
  out << "name = " << p.name << "\n\n[device]\n"
      << "compute_units = " << p.device.compute_units << "\n"
      << "resident_wgs_per_cu = " << p.device.resident_wgs_per_cu << "\n"
      << "cu_gflops = " << p.device.cu_gflops << "\n"
      << "memory_gbps = " << p.device.memory_gbps << "\n"
      << "launch_us = " << p.device.launch_us << "\n"
      << "node_memory_gbps = " << p.device.node_memory_gbps << "\n"
      << "gemm_pack_rows = " << p.device.gemm_pack_rows << "\n"
      << "gemm_cold_gbps = " << p.device.gemm_cold_gbps << "\n"
      << "load_latency_us = " << p.device.load_latency_us << "\n"
      << "handover_us = " << p.device.handover_us << "\n"
      << "cache_mib = " << p.device.cache_mib << "\n"
      << "cache_gbps = " << p.device.cache_gbps << "\n\n[links]\n"
      << "gpus_per_node = " << p.links.gpus_per_node << "\n"
      << "peer_topology = " << to_string(p.links.peer_topology) << "\n"
      << "peer_gbps = " << p.links.peer_gbps << "\n"
      << "peer_us = " << p.links.peer_us << "\n"
      << "nic_gbps = " << p.links.nic_gbps << "\n"
      << "nic_us = " << p.links.nic_us << "\n"
      << "nics_per_node = " << p.links.nics() << "\n"
      << "put_us = " << p.links.put_us << "\n"
      << "put_cu_share = " << p.links.put_cu_share << "\n"
      << "nic_cpu_gbps = " << p.links.nic_cpu_gbps << "\n\n[efficiency]\n";
  for (int k = 0; k < kKernels; ++k)
    out << to_string(static_cast<Kernel>(k)) << " = " << p.efficiency[k] << "\n";
  for (int k = 0; k < kKernels; ++k)
    if (p.in_cache[k] != 0)
      out << to_string(static_cast<Kernel>(k)) << kInCache << " = " << p.in_cache[k] << "\n";
  return out.str();
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (int i = 0; i < builtin::kPresetCount; ++i) names.emplace_back(builtin::kPresets[i].name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string_view preset_text(std::string_view name) {
  for (int i = 0; i < builtin::kPresetCount; ++i)
    if (name == builtin::kPresets[i].name) return builtin::kPresets[i].text;
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument(detail::make_string("unknown preset '", name, "' (built in: ", known,
                                            "; or the path of a preset file)"));
}

Preset load_preset(const std::string& name_or_path) {
  const bool path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 7 && name_or_path.compare(name_or_path.size() - 7, 7, ".preset") == 0);
  if (!path) {
    Preset p = parse_preset(preset_text(name_or_path), name_or_path + " (built-in)");
    p.origin = "built-in";
    return p;
  }
  std::ifstream in(name_or_path);
  require(in.good(), "cannot read preset file '", name_or_path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_preset(text.str(), name_or_path);
}

}  // namespace fusedcoll::model
