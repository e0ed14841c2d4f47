// The cost model (include/fusedcoll/model.hpp): the work of each kernel, roofline costs computed
// by hand, the built-in presets, and preset files that must be rejected with a message naming the
// field.

#include "fusedcoll/model.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fc = fusedcoll;
namespace m = fusedcoll::model;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

/// A small machine whose costs are easy to compute by hand.
m::Preset toy() {
  m::Preset p;
  p.name = "toy";
  // 2 CUs of 1 GFLOP/s, 4 GB/s (2 per CU), 3 us launch; the node's memory is 6 GB/s, less than
  // its 2 devices' 8: shared.
  p.device = {2, 4, 1.0, 4.0, 3.0, 6.0};
  p.links = {2, m::PeerTopology::mesh, 10.0, 1.0, 1.0, 5.0, 0.5};
  p.efficiency.fill(1.0);
  p.efficiency[static_cast<int>(m::Kernel::gemm)] = 0.5;
  return p;
}

/// Replaces the first line of `text` that starts with `key` by `line` ("" deletes it).
std::string edit(std::string text, const std::string& key, const std::string& line) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    if (text.compare(at, key.size(), key) == 0) {
      text.replace(at, end - at + 1, line.empty() ? "" : line + "\n");
      return text;
    }
    at = end + 1;
  }
  ADD_FAILURE() << "no line starts with " << key;
  return text;
}

std::string parse_error(const std::string& text) {
  try {
    m::parse_preset(text, "test");
  } catch (const fc::InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

/// An optional number of [device], `key`: 0 where `text` leaves it out; `value` given on a line
/// after the one of `after`; rejected by name as negative or not a number, with its range and
/// `unit`.
void expect_optional_device_number(const std::string& text, const std::string& after,
                                   const std::string& key, double m::Device::*field, double value,
                                   const std::string& unit) {
  EXPECT_EQ(m::parse_preset(text, "test").device.*field, 0) << key;
  const std::size_t at = text.find("\n" + after) + 1;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  std::ostringstream given;
  given << line << "\n" << key << " = " << value;
  const std::string with = edit(text, after, given.str());
  EXPECT_EQ(m::parse_preset(with, "test").device.*field, value) << key;
  EXPECT_THAT(parse_error(edit(with, key, key + " = -1")),
              HasSubstr("device." + key + " = -1 is out of range: it must be a number in [0, 1e+06] " +
                        unit));
  EXPECT_THAT(parse_error(edit(with, key, key + " = fast")),
              HasSubstr("device." + key + " = 'fast' is not a number"));
}

}  // namespace

TEST(Model, WorkOfEachKernel) {
  const m::Work g = m::gemm(16, 64, 1024);
  EXPECT_EQ(g.kernel, m::Kernel::gemm);
  EXPECT_EQ(g.flops, 2.0 * 16 * 64 * 1024);
  EXPECT_EQ(g.bytes, 4.0 * (16 * 1024 + 1024 * 64 + 16 * 64));
  const m::Work v = m::gemv(4, 2752, 64);
  EXPECT_EQ(v.flops, 2.0 * 4 * 64 * 2752);
  EXPECT_EQ(v.bytes, 4.0 * (64 * 2752 + 4 * 2752 + 4 * 64));
  const m::Work e = m::embedding(320, 10, 64, 8, false);
  EXPECT_EQ(e.flops, 320.0 * 64);
  EXPECT_EQ(e.bytes, 4.0 * 320 * 64 + 4.0 * 10 * 64 + 8.0 * (320 + 10 + 1));
  EXPECT_EQ(m::embedding(320, 10, 64, 4, true).flops, 2.0 * 320 * 64);
  EXPECT_EQ(m::reduce(1000).bytes, 12000.0);
  EXPECT_EQ(m::copy(1000).bytes, 2000.0);
  const m::Work enc = m::encode(fc::WireFormat::f16, 1000);
  EXPECT_EQ(enc.kernel, m::Kernel::encode_f16);
  EXPECT_EQ(enc.bytes, 6000.0);
  EXPECT_EQ(m::decode(fc::WireFormat::fp8_e5m2, 1000, true).kernel, m::Kernel::decode_fp8);
  EXPECT_EQ(m::decode(fc::WireFormat::fp8_e4m3, 1000, true).flops,
            m::decode(fc::WireFormat::fp8_e4m3, 1000, false).flops + 1000);
  EXPECT_EQ(m::encode(fc::WireFormat::none, 1000).kernel, m::Kernel::copy);
  // The fused owner step of a direct AllReduce, P = 4, f16: three rows decoded, the own one
  // round-tripped, the result encoded and decoded; only sources and outputs reach memory.
  const auto fused = m::wire_reduce(fc::WireFormat::f16, 1000, false, 3, 1, 0, true);
  EXPECT_EQ(fused[0].kernel, m::Kernel::encode_f16);
  EXPECT_EQ(fused[0].flops, 2.0 * 2 * 1000);
  EXPECT_EQ(fused[0].bytes, (4.0 + 2.0) * 1000);
  EXPECT_EQ(fused[1].kernel, m::Kernel::decode_f16);
  EXPECT_EQ(fused[1].flops, 1.0 * 5 * 1000);
  EXPECT_EQ(fused[1].bytes, (2.0 * 3 + 4.0) * 1000);
  EXPECT_EQ(fused[2].kernel, m::Kernel::reduce);
  EXPECT_EQ(fused[2].flops, 3.0 * 1000);
  EXPECT_EQ(fused[2].bytes, 0.0);
  // The ring's fold: one row decoded plus the own f32 value, the sum stored as f32.
  const auto ring = m::wire_reduce(fc::WireFormat::fp8_e4m3, 1000, true, 1, 0, 1, false);
  EXPECT_EQ(ring[0].flops, 0.0);
  EXPECT_EQ(ring[1].flops, 11.0 * 1000);
  EXPECT_EQ(ring[1].bytes, 1000.0);
  EXPECT_EQ(ring[2].bytes, 8.0 * 1000);
  // The same fold encoding the running value for the next rank, never decoded or stored as f32:
  // the encode writes its wire bytes, the decode is the received row's alone.
  const auto next = m::wire_reduce(fc::WireFormat::fp8_e4m3, 1000, true, 1, 0, 1, true, false);
  EXPECT_EQ(next[0].flops, m::encode(fc::WireFormat::fp8_e4m3, 1000, true).flops);
  EXPECT_EQ(next[0].bytes, 1000.0);
  EXPECT_EQ(next[1].flops, 11.0 * 1000);
  EXPECT_EQ(next[1].bytes, 1000.0);
  EXPECT_EQ(next[2].bytes, 4.0 * 1000);
  EXPECT_THROW((void)m::wire_reduce(fc::WireFormat::f16, 1000, false, 0, 0, 0, true),
               fc::InvalidArgument);
  EXPECT_THROW((void)m::wire_reduce(fc::WireFormat::none, 1000, false, 1, 0, 0, true),
               fc::InvalidArgument);
}

TEST(Model, RooflineByHand) {
  const m::Preset p = toy();
  // gemm 10^3: 2,000 flops at 1 GFLOP/s = 2 us; 1,200 bytes at 2 GB/s = 0.6 us; efficiency 0.5.
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(10, 10, 10)), 4e-6);
  // A copy of 1,000 bytes moves 2,000 at a CU's 2 GB/s: 1 us.
  EXPECT_DOUBLE_EQ(m::seconds(p, m::copy(1000)), 1e-6);
  EXPECT_DOUBLE_EQ(m::launch_seconds(p), 3e-6);
}

TEST(Model, PackedGemmTileByHand) {
  m::Preset p = toy();  // a CU: 1 GFLOP/s, 2 GB/s; gemm efficiency 0.5, copy 1
  const m::Work g = m::gemm(5, 10, 10);
  EXPECT_EQ(g.rows, 5);
  EXPECT_EQ(g.cols, 10);
  EXPECT_EQ(g.k, 10);
  EXPECT_EQ(m::copy(100).rows, 0);
  // gemm_pack_rows 0: the roofline, 1,000 flops at 1 GFLOP/s over 0.5.
  EXPECT_DOUBLE_EQ(m::seconds(p, g), 2e-6);
  p.device.gemm_pack_rows = 4;
  // The panel of B (10 x 10 floats) copied: 800 bytes at 2 GB/s, 0.4 us; then 8 rows (two
  // blocks of 4) of arithmetic: 1,600 flops at 1 GFLOP/s over 0.5, 3.2 us.
  EXPECT_DOUBLE_EQ(m::seconds(p, g), 3.6e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(8, 10, 10)), 3.6e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(9, 10, 10)), 0.4e-6 + 4.8e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(1, 10, 10)), 0.4e-6 + 1.6e-6);
  p.efficiency[static_cast<int>(m::Kernel::copy)] = 2;  // the packing is a copy
  EXPECT_DOUBLE_EQ(m::seconds(p, g), 3.4e-6);
  // A first touch packs from memory at gemm_cold_gbps (0: no such term).
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(5, 10, 10, true)), 3.4e-6);
  p.device.gemm_cold_gbps = 0.5;  // 800 bytes: 1.6 us, efficiencies aside
  EXPECT_TRUE(m::gemm(5, 10, 10, true).first_touch);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(5, 10, 10, true)), 1.6e-6 + 3.2e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, g), 3.4e-6);
  // With the kernel's working set in the cache, a first touch packs as a warm tile: the previous
  // call left the panel there. The arithmetic is the same.
  p.device.cache_mib = 1;
  p.device.cache_gbps = 8;
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::gemm(5, 10, 10, true)), 3.4e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::gemm(5, 10, 10, true)}, 0, 1000), 3.4e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::gemm(5, 10, 10, true)}, 0, 2 << 20), 1.6e-6 + 3.2e-6);
  p.device.cache_mib = 0;
  p.device.gemm_pack_rows = 0;  // the roofline knows no packing
  EXPECT_DOUBLE_EQ(m::seconds(p, m::gemm(5, 10, 10, true)), 2e-6);
  p.device.gemm_pack_rows = 4;
  // Other kernels, and a Work without the tile's shape, keep the roofline.
  EXPECT_DOUBLE_EQ(m::seconds(p, m::copy(1000)), 0.5e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::Work{m::Kernel::gemm, 1000, 0}), 2e-6);
}

TEST(Model, LoadLatencyByHand) {
  m::Preset p = toy();
  // No such term by default.
  EXPECT_EQ(m::latency_seconds(p, m::copy(1 << 20)), 0);
  p.device.load_latency_us = 0.5;
  // A round is 256 threads' loads: a word each for the scalar tile kernels, 16 bytes for the
  // vector ones.
  EXPECT_EQ(m::load_round_bytes(m::Kernel::gemv), 1024);
  EXPECT_EQ(m::load_round_bytes(m::Kernel::embedding), 1024);
  EXPECT_EQ(m::load_round_bytes(m::Kernel::gemm), 1024);
  EXPECT_EQ(m::load_round_bytes(m::Kernel::copy), 4096);
  EXPECT_EQ(m::load_round_bytes(m::Kernel::decode_fp8), 4096);
  // 10240 bytes of gemv: 10 rounds of 0.5 us; the same bytes copied: 2.5 rounds.
  EXPECT_DOUBLE_EQ(m::latency_seconds(p, m::Work{m::Kernel::gemv, 0, 10240}), 5e-6);
  EXPECT_DOUBLE_EQ(m::latency_seconds(p, m::Work{m::Kernel::copy, 0, 10240}), 1.25e-6);
  // A copy of 8192 bytes reads and writes 16384: 4 rounds, 2 us; the roofline is unchanged.
  const double roofline = m::seconds(p, m::copy(8192));
  EXPECT_DOUBLE_EQ(m::latency_seconds(p, m::copy(8192)), 2e-6);
  p.device.load_latency_us = 0;
  EXPECT_DOUBLE_EQ(m::seconds(p, m::copy(8192)), roofline);
}

TEST(Model, HandOverByHand) {
  m::Preset p = toy();
  EXPECT_EQ(m::handover_seconds(p), 0);  // no such term by default
  p.device.handover_us = 10.7;
  EXPECT_DOUBLE_EQ(m::handover_seconds(p), 10.7e-6);
}

TEST(Model, IssueByHand) {
  m::Preset p = toy();
  p.links.put_us = 0.25;
  EXPECT_DOUBLE_EQ(m::issue_seconds(p, 0, 1), 0.25e-6);
  EXPECT_DOUBLE_EQ(m::issue_seconds(p, 0, p.links.gpus_per_node), 0.25e-6);  // another node too
  EXPECT_EQ(m::issue_seconds(p, 1, 1), 0);  // to itself: nothing is handed to a transport
}

TEST(Model, AWorkingSetInTheCacheByHand) {
  m::Preset p = toy();
  p.efficiency[static_cast<int>(m::Kernel::reduce)] = 2;
  p.efficiency[static_cast<int>(m::Kernel::encode_f16)] = 0.5;
  const double mib = 1 << 20;
  EXPECT_FALSE(m::in_cache(p, 1000, 2));  // no cache: no such term
  p.device.cache_mib = 1;
  p.device.cache_gbps = 8;  // 4 GB/s per compute unit
  // The node's 2 devices' working sets together against the 1 MiB cache; 0 devices sharing (a
  // device's own memory) counts the device alone; an undeclared working set (0) is never in it.
  EXPECT_TRUE(m::in_cache(p, mib / 2, 2));
  EXPECT_FALSE(m::in_cache(p, mib / 2 + 1, 2));
  EXPECT_TRUE(m::in_cache(p, mib, 0));
  EXPECT_TRUE(m::in_cache(p, mib, 1));
  EXPECT_FALSE(m::in_cache(p, mib, 2));
  EXPECT_FALSE(m::in_cache(p, 0, 2));
  // In the cache, bytes at 4 GB/s times the kernel's efficiency, flops as ever: a copy of 1000
  // bytes 2000 / 4e9 = 0.5 us; a reduce of 1000 floats 12000 bytes / (4e9 * 2) = 1.5 us (its
  // 1000 flops / (1e9 * 2) = 0.5 us); an f16 encode of 1000 floats 6000 bytes / (4e9 * 0.5) =
  // 3 us, but its 2000 operations / (1e9 * 0.5) = 4 us.
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::copy(1000)), 0.5e-6);
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::reduce(1000)), 1.5e-6);
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::encode(fc::WireFormat::f16, 1000)), 4e-6);
  // A span of the copy and the reduce: 2 us in the cache, nothing of the node's memory. From
  // memory, 1 us + 3 us on the compute unit (2 GB/s), against the node's 6 GB/s shared by 2:
  // (2000 / 6e9 + 12000 / (6e9 * 2)) * 2 = 2.67 us; the longer, 4 us. So too where the working
  // set is undeclared or, with the other device's, too large.
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(1000), m::reduce(1000)}, 2, mib / 2), 2e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(1000), m::reduce(1000)}, 2, 0), 4e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(1000), m::reduce(1000)}, 2, mib), 4e-6);
  // A kernel with an in-cache figure: its operations at that fraction of the 1 GFLOP/s, its
  // bytes at the cache's 4 GB/s, the longer. The f16 encode at 0.25: 2000 / 0.25e9 = 8 us
  // against 6000 / 4e9 = 1.5 us. The fused owner step of a direct AllReduce (P = 4, above)
  // counts 6000 bytes of encode but its 4000 operations: 16 us where its bytes alone, at the
  // efficiency, give 3 us. From memory the figure changes nothing: (6000 / 2e9) / 0.5 = 6 us.
  p.in_cache[static_cast<int>(m::Kernel::encode_f16)] = 0.25;
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::encode(fc::WireFormat::f16, 1000)), 8e-6);
  p.in_cache[static_cast<int>(m::Kernel::encode_f16)] = 4;
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, m::encode(fc::WireFormat::f16, 1000)), 1.5e-6);
  p.in_cache[static_cast<int>(m::Kernel::encode_f16)] = 0.25;
  const auto fused = m::wire_reduce(fc::WireFormat::f16, 1000, false, 3, 1, 0, true);
  EXPECT_DOUBLE_EQ(m::cache_seconds(p, fused[0]), 16e-6);
  EXPECT_DOUBLE_EQ(m::seconds(p, m::encode(fc::WireFormat::f16, 1000)), 6e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {fused[0]}, 2, mib / 2), 16e-6);
}

TEST(Model, SharedNodeMemoryAndWholeDevicePassByHand) {
  m::Preset p = toy();
  EXPECT_TRUE(m::shares_node_memory(p));
  // A copy of 3000 bytes: 6000 bytes through 6 GB/s = 1 us; the kernel's efficiency scales it
  // as it scales the device's bandwidth.
  EXPECT_DOUBLE_EQ(m::node_memory_seconds(p, m::copy(3000)), 1e-6);
  p.efficiency[static_cast<int>(m::Kernel::copy)] = 2;
  EXPECT_DOUBLE_EQ(m::node_memory_seconds(p, m::copy(3000)), 0.5e-6);
  p.efficiency[static_cast<int>(m::Kernel::copy)] = 0.5;
  EXPECT_DOUBLE_EQ(m::node_memory_seconds(p, m::copy(3000)), 2e-6);
  // A span of two such copies: 12 us on its unit (6000 bytes each at 2 GB/s over 0.5), 4 us of
  // the node's memory: with 4 devices sharing it, 16 us; with 2 or none, the unit's 12.
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(3000), m::copy(3000)}, 0), 12e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(3000), m::copy(3000)}, 2), 12e-6);
  EXPECT_DOUBLE_EQ(m::span_seconds(p, {m::copy(3000), m::copy(3000)}, 4), 16e-6);
  p.device.node_memory_gbps = 8;  // the devices' sum: each has its own
  EXPECT_FALSE(m::shares_node_memory(p));
  // amax of 2000 values: 8000 bytes read; over the whole device (4 GB/s) 2 us, after the 3 us
  // launch.
  const m::Work a = m::amax(2000);
  EXPECT_EQ(a.kernel, m::Kernel::amax);
  EXPECT_EQ(a.flops, 2000.0);
  EXPECT_EQ(a.bytes, 8000.0);
  EXPECT_DOUBLE_EQ(m::device_seconds(toy(), a), 5e-6);
  // Its own efficiency, not reduce's: at 0.25 the pass takes 8 us, on a CU (2 GB/s) 16 us.
  m::Preset slow = toy();
  slow.efficiency[static_cast<int>(m::Kernel::amax)] = 0.25;
  slow.efficiency[static_cast<int>(m::Kernel::reduce)] = 4;
  EXPECT_DOUBLE_EQ(m::device_seconds(slow, a), 11e-6);
  EXPECT_DOUBLE_EQ(m::seconds(slow, a), 16e-6);
  EXPECT_STREQ(m::to_string(m::Kernel::amax), "amax");
}

TEST(Model, TransferInsideAndAcrossNodes) {
  const m::Preset p = toy();  // 2 devices per node
  EXPECT_TRUE(p.links.same_node(0, 1));
  EXPECT_FALSE(p.links.same_node(1, 2));
  EXPECT_DOUBLE_EQ(m::transfer_seconds(p, 0, 1, 10000), 1e-6 + 1e-6);  // 10 GB/s + 1 us
  EXPECT_DOUBLE_EQ(m::transfer_seconds(p, 1, 2, 10000), 5e-6 + 1e-5);  // 1 GB/s + 5 us
  EXPECT_EQ(m::transfer_seconds(p, 3, 3, 10000), 0.0);
  // The network stack's CPU time: none unless the preset has it, and only across nodes.
  EXPECT_EQ(m::nic_cpu_seconds(p, 1, 2, 10000), 0.0);
  m::Preset tcp = p;
  tcp.links.nic_cpu_gbps = 2;
  EXPECT_DOUBLE_EQ(m::nic_cpu_seconds(tcp, 1, 2, 10000), 5e-6);  // 10 kB at 2 GB/s
  EXPECT_DOUBLE_EQ(m::nic_cpu_seconds(tcp, 2, 0, 10000), 5e-6);
  EXPECT_EQ(m::nic_cpu_seconds(tcp, 0, 1, 10000), 0.0);  // inside a node
  EXPECT_EQ(m::nic_cpu_seconds(tcp, 2, 2, 10000), 0.0);
  // `shared` (the node's devices are slices of one device): inside the node a put is a copy
  // through its one memory, 20 kB read + written at 6 GB/s, whatever peer_gbps says; across
  // nodes the NIC as before.
  m::Preset one = p;
  one.links.peer_topology = m::PeerTopology::shared;
  EXPECT_DOUBLE_EQ(m::peer_seconds(one, 10000), 20000 / 6e9);
  EXPECT_DOUBLE_EQ(m::transfer_seconds(one, 0, 1, 10000), 1e-6 + 20000 / 6e9);
  EXPECT_DOUBLE_EQ(m::transfer_seconds(one, 1, 2, 10000), 5e-6 + 1e-5);
  EXPECT_DOUBLE_EQ(m::peer_seconds(p, 10000), 1e-6);  // mesh: peer_gbps
}

TEST(Model, BuiltInPresetsLoadAndRoundTrip) {
  EXPECT_EQ(m::preset_names(), (std::vector<std::string>{"h100", "host", "mi250x"}));
  for (const auto& name : m::preset_names()) {
    SCOPED_TRACE(name);
    const m::Preset p = m::load_preset(name);
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.origin, "built-in");
    EXPECT_NO_THROW(m::validate(p));
    const m::Preset back = m::parse_preset(m::to_text(p), "round trip");
    EXPECT_EQ(m::to_text(back), m::to_text(p));
    EXPECT_EQ(back.device.compute_units, p.device.compute_units);
    EXPECT_EQ(back.links.peer_gbps, p.links.peer_gbps);
    EXPECT_EQ(back.efficiency, p.efficiency);
  }
  const m::Preset mi = m::load_preset("mi250x");
  EXPECT_EQ(mi.device.compute_units, 110);
  EXPECT_EQ(mi.links.gpus_per_node, 8);
  EXPECT_EQ(m::load_preset("h100").links.peer_topology, m::PeerTopology::switched);
  // The GPU presets leave gemm_pack_rows out (the roofline); host packs in rows of the
  // micro-kernel.
  EXPECT_EQ(mi.device.gemm_pack_rows, 0);
  EXPECT_EQ(m::load_preset("h100").device.gemm_pack_rows, 0);
  EXPECT_GT(m::load_preset("host").device.gemm_pack_rows, 0);
  EXPECT_GT(m::load_preset("host").device.gemm_cold_gbps, 0);
  EXPECT_EQ(mi.device.gemm_cold_gbps, 0);
}

// The preset files of docs/results/ (the validation tables of docs/results/virtual-time.md were
// made with them) load as they are, and the H100 single-GPU cut is what fusedcoll-gpu-bench runs:
// a quarter of h100's GPU per rank, its memory split four ways rather than shared (so the node
// term stays off), its peers on one port.
TEST(Model, ResultsPresetFilesLoad) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(FUSEDCOLL_SOURCE_DIR) / "docs" / "results";
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".preset") {
      SCOPED_TRACE(entry.path().string());
      const m::Preset p = m::load_preset(entry.path().string());
      EXPECT_EQ(p.name, entry.path().stem().string());
      EXPECT_NO_THROW(m::validate(p));
      names.push_back(p.name);
    }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"host-4ranks", "h100-1gpu-4ranks",
                                              "h100-1gpu-4ranks-datasheet"}));
  const m::Preset h100 = m::load_preset("h100");
  for (const char* file : {"h100-1gpu-4ranks.preset", "h100-1gpu-4ranks-datasheet.preset"}) {
    SCOPED_TRACE(file);
    const m::Preset p = m::load_preset((dir / file).string());
    EXPECT_EQ(p.links.gpus_per_node, 4);
    EXPECT_EQ(p.device.compute_units * p.links.gpus_per_node, h100.device.compute_units);
    EXPECT_EQ(p.device.cu_gflops, h100.device.cu_gflops);
    EXPECT_FALSE(m::shares_node_memory(p));
    EXPECT_NEAR(p.device.memory_gbps * 4, p.device.node_memory_gbps, 1e-9);
    EXPECT_LE(p.device.node_memory_gbps, h100.device.memory_gbps);
    // The ranks are one GPU: their puts share its one memory (a rank alone gets all of it).
    EXPECT_EQ(p.links.peer_topology, m::PeerTopology::shared);
    EXPECT_NEAR(m::peer_seconds(p, 1 << 20),
                2.0 * (1 << 20) /
                    (p.device.node_memory_gbps * 1e9 * p.efficiency_of(m::Kernel::copy)),
                1e-15);
  }
}

TEST(Model, PresetFromAFile) {
  const std::string path = testing::TempDir() + "fusedcoll_model_test.preset";
  {
    std::ofstream out(path);
    out << edit(std::string(m::preset_text("mi250x")), "name =", "name = my-cluster");
  }
  const m::Preset p = m::load_preset(path);
  EXPECT_EQ(p.name, "my-cluster");
  EXPECT_EQ(p.origin, path);
  EXPECT_EQ(p.device.memory_gbps, 1600);
  std::remove(path.c_str());
  try {
    m::load_preset(path);
    ADD_FAILURE() << "a missing file loaded";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot read preset file '" + path + "'"));
  }
}

TEST(Model, RejectsUnknownPresetName) {
  try {
    m::load_preset("a100");
    ADD_FAILURE() << "an unknown preset loaded";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown preset 'a100' (built in: h100, host, mi250x"));
  }
}

TEST(Model, RejectsBadFilesNamingTheField) {
  const std::string good(m::preset_text("h100"));
  ASSERT_NO_THROW(m::parse_preset(good, "test"));
  // A missing field.
  EXPECT_THAT(parse_error(edit(good, "nic_gbps", "")), HasSubstr("missing field 'links.nic_gbps'"));
  EXPECT_THAT(parse_error(edit(good, "decode_fp8", "")),
              HasSubstr("missing field 'efficiency.decode_fp8'"));
  EXPECT_THAT(parse_error(edit(good, "name", "")), HasSubstr("missing field 'name'"));
  EXPECT_THAT(parse_error(edit(good, "node_memory_gbps", "")),
              HasSubstr("missing field 'device.node_memory_gbps' (in [device])"));
  EXPECT_THAT(parse_error(edit(good, "put_us", "")),
              HasSubstr("missing field 'links.put_us' (in [links])"));
  EXPECT_THAT(parse_error(edit(good, "node_memory_gbps", "node_memory_gbps = -3")),
              HasSubstr("device.node_memory_gbps = -3 is out of range: it must be a number in (0, "
                        "1e+06] GB/s"));
  EXPECT_THAT(parse_error(edit(good, "node_memory_gbps", "node_memory_gbps = 0")),
              HasSubstr("device.node_memory_gbps = 0 is out of range"));
  EXPECT_THAT(parse_error(edit(good, "put_us", "put_us = -0.5")),
              HasSubstr("links.put_us = -0.5 is out of range: it must be a number in [0, 1e+06] us"));
  EXPECT_THAT(parse_error(edit(good, "put_cu_share", "")),
              HasSubstr("missing field 'links.put_cu_share' (in [links])"));
  EXPECT_THAT(parse_error(edit(good, "put_cu_share", "put_cu_share = 1.5")),
              HasSubstr("links.put_cu_share = 1.5 is out of range: it must be a number in [0, 1]"));
  EXPECT_THAT(parse_error(edit(good, "put_cu_share", "put_cu_share = -0.1")),
              HasSubstr("links.put_cu_share = -0.1 is out of range"));
  // gemm_pack_rows is optional (0), and an integer in [0, 64].
  EXPECT_EQ(m::parse_preset(good, "test").device.gemm_pack_rows, 0);
  const std::string packed =
      edit(good, "node_memory_gbps", "node_memory_gbps = 26800\ngemm_pack_rows = 8");
  EXPECT_EQ(m::parse_preset(packed, "test").device.gemm_pack_rows, 8);
  // gemm_cold_gbps, load_latency_us and handover_us likewise (0), numbers in [0, 1e6].
  expect_optional_device_number(packed, "gemm_pack_rows", "gemm_cold_gbps", &m::Device::gemm_cold_gbps,
                                6.5, "GB/s");
  expect_optional_device_number(good, "launch_us", "load_latency_us", &m::Device::load_latency_us,
                                0.2, "us");
  expect_optional_device_number(good, "launch_us", "handover_us", &m::Device::handover_us, 10.7,
                                "us");
  // cache_gbps and cache_mib likewise (0: no cache term); a cache needs its rate.
  expect_optional_device_number(good, "launch_us", "cache_gbps", &m::Device::cache_gbps, 28.5,
                                "GB/s");
  const std::string rated = edit(good, "launch_us", "launch_us = 4\ncache_gbps = 28.5");
  expect_optional_device_number(rated, "cache_gbps", "cache_mib", &m::Device::cache_mib, 96,
                                "MiB");
  EXPECT_THAT(parse_error(edit(good, "launch_us", "launch_us = 4\ncache_mib = 96")),
              HasSubstr("device.cache_mib = 96 needs device.cache_gbps, the cache's rate"));
  // A kernel's in-cache figure: optional (0), in (0, 4], written back by to_text.
  EXPECT_EQ(m::parse_preset(good, "test").in_cache_of(m::Kernel::decode_fp8), 0);
  const std::string cached = good + "decode_fp8_in_cache = 0.35\n";
  const m::Preset with_cached = m::parse_preset(cached, "test");
  EXPECT_EQ(with_cached.in_cache_of(m::Kernel::decode_fp8), 0.35);
  EXPECT_EQ(with_cached.in_cache_of(m::Kernel::encode_fp8), 0);
  EXPECT_EQ(m::parse_preset(m::to_text(with_cached), "test").in_cache, with_cached.in_cache);
  EXPECT_THAT(m::to_text(m::parse_preset(good, "test")), Not(HasSubstr("_in_cache")));
  EXPECT_THAT(parse_error(good + "decode_fp8_in_cache = 0\n"),
              HasSubstr("efficiency.decode_fp8_in_cache = 0 is out of range: it must be a number "
                        "in (0, 4]"));
  EXPECT_THAT(parse_error(good + "decode_fp8_in_cache = 5\n"),
              HasSubstr("efficiency.decode_fp8_in_cache = 5 is out of range"));
  EXPECT_THAT(parse_error(good + "decode_fp9_in_cache = 1\n"),
              HasSubstr("unknown field 'efficiency.decode_fp9_in_cache'"));
  EXPECT_THAT(parse_error(cached + "decode_fp8_in_cache = 0.4\n"),
              HasSubstr("field 'efficiency.decode_fp8_in_cache' repeats line"));
  m::Preset bad_cached = with_cached;
  bad_cached.in_cache[static_cast<int>(m::Kernel::amax)] = -1;
  EXPECT_THROW(m::validate(bad_cached), fc::InvalidArgument);
  EXPECT_THAT(parse_error(edit(packed, "gemm_pack_rows", "gemm_pack_rows = -1")),
              HasSubstr("device.gemm_pack_rows = -1 is out of range: it must be an integer in [0, "
                        "64]"));
  EXPECT_THAT(parse_error(edit(packed, "gemm_pack_rows", "gemm_pack_rows = 65")),
              HasSubstr("device.gemm_pack_rows = 65 is out of range"));
  EXPECT_THAT(parse_error(edit(packed, "gemm_pack_rows", "gemm_pack_rows = 2.5")),
              HasSubstr("device.gemm_pack_rows = 2.5 is not an integer"));
  EXPECT_THAT(parse_error(packed + "[device]\ngemm_pack_rows = 4\n"),
              HasSubstr("field 'device.gemm_pack_rows' repeats line"));
  // nics_per_node is optional (0: one NIC per device, what nics() and to_text then say), an
  // integer in [1, gpus_per_node].
  const m::Preset one_each = m::parse_preset(good, "test");
  EXPECT_EQ(one_each.links.nics_per_node, 0);
  EXPECT_EQ(one_each.links.nics(), 8);
  EXPECT_EQ(one_each.links.nic_of(13), 13);
  EXPECT_THAT(m::to_text(one_each), HasSubstr("nics_per_node = 8\n"));
  const std::string shared = edit(good, "nic_us", "nic_us = 2\nnics_per_node = 2");
  const m::Preset two = m::parse_preset(shared, "test");
  EXPECT_EQ(two.links.nics(), 2);
  EXPECT_EQ(two.links.nic_of(5), 1);   // device 5 of node 0: NIC 5 % 2
  EXPECT_EQ(two.links.nic_of(12), 2);  // device 4 of node 1: the node's NIC 0
  EXPECT_EQ(m::to_text(m::parse_preset(m::to_text(two), "round trip")), m::to_text(two));
  EXPECT_THAT(parse_error(edit(shared, "nics_per_node", "nics_per_node = 0")),
              HasSubstr("links.nics_per_node = 0 is out of range: it must be an integer in [1, "));
  EXPECT_THAT(parse_error(edit(shared, "nics_per_node", "nics_per_node = 9")),
              HasSubstr("links.nics_per_node = 9 is out of range: it must be at most "
                        "links.gpus_per_node = 8"));
  EXPECT_THAT(parse_error(edit(shared, "nics_per_node", "nics_per_node = 1.5")),
              HasSubstr("links.nics_per_node = 1.5 is not an integer"));
  // nic_cpu_gbps is optional (0: no network-stack cost), a number in [0, 1e6] GB/s.
  EXPECT_EQ(one_each.links.nic_cpu_gbps, 0.0);
  EXPECT_THAT(m::to_text(one_each), HasSubstr("nic_cpu_gbps = 0\n"));
  const std::string tcp = edit(good, "nic_us", "nic_us = 2\nnic_cpu_gbps = 1.25");
  EXPECT_EQ(m::parse_preset(tcp, "test").links.nic_cpu_gbps, 1.25);
  EXPECT_EQ(m::to_text(m::parse_preset(m::to_text(m::parse_preset(tcp, "t")), "round trip")),
            m::to_text(m::parse_preset(tcp, "t")));
  EXPECT_THAT(parse_error(edit(tcp, "nic_cpu_gbps", "nic_cpu_gbps = -1")),
              HasSubstr("links.nic_cpu_gbps = -1 is out of range: it must be a number in [0, "
                        "1e+06] GB/s"));
  EXPECT_THAT(parse_error(edit(tcp, "nic_cpu_gbps", "nic_cpu_gbps = fast")),
              HasSubstr("links.nic_cpu_gbps = 'fast' is not a number"));
  // A negative or zero bandwidth, a negative latency, an efficiency above 4.
  EXPECT_THAT(parse_error(edit(good, "peer_gbps", "peer_gbps = -5")),
              HasSubstr("links.peer_gbps = -5 is out of range: it must be a number in (0, 1e+06] "
                        "GB/s"));
  EXPECT_THAT(parse_error(edit(good, "memory_gbps", "memory_gbps = 0")),
              HasSubstr("device.memory_gbps = 0 is out of range"));
  EXPECT_THAT(parse_error(edit(good, "nic_us", "nic_us = -1")), HasSubstr("links.nic_us = -1"));
  EXPECT_THAT(parse_error(edit(good, "gemm =", "gemm = 5")), HasSubstr("efficiency.gemm = 5"));
  EXPECT_THAT(parse_error(edit(good, "amax =", "")),
              HasSubstr("missing field 'efficiency.amax' (in [efficiency])"));
  EXPECT_THAT(parse_error(edit(good, "amax =", "amax = -0.5")),
              HasSubstr("efficiency.amax = -0.5 is out of range: it must be a number in (0, 4]"));
  EXPECT_THAT(parse_error(edit(good, "amax =", "amax = 0")),
              HasSubstr("efficiency.amax = 0 is out of range"));
  // Unknown names: a field, a section, a topology.
  EXPECT_THAT(parse_error(edit(good, "cu_gflops", "cu_glops = 3")),
              HasSubstr("unknown field 'device.cu_glops' (the fields of [device]: compute_units"));
  EXPECT_THAT(parse_error(edit(good, "[links]", "[network]")),
              HasSubstr("unknown section [network]"));
  EXPECT_EQ(m::parse_preset(edit(good, "peer_topology", "peer_topology = shared"), "x")
                .links.peer_topology,
            m::PeerTopology::shared);
  EXPECT_THAT(parse_error(edit(good, "peer_topology", "peer_topology = torus")),
              HasSubstr("unknown links.peer_topology 'torus' (mesh, switched or shared)"));
  // Malformed values and lines, repeats; the line number is named.
  EXPECT_THAT(parse_error(edit(good, "compute_units", "compute_units = 13.5")),
              HasSubstr("device.compute_units = 13.5 is not an integer"));
  EXPECT_THAT(parse_error(edit(good, "launch_us", "launch_us = fast")),
              HasSubstr("device.launch_us = 'fast' is not a number"));
  EXPECT_THAT(parse_error(edit(good, "launch_us", "launch_us")), HasSubstr("is not 'key = value'"));
  EXPECT_THAT(parse_error(good + "[device]\nlaunch_us = 3\n"),
              HasSubstr("field 'device.launch_us' repeats line"));
  EXPECT_THAT(parse_error(edit(good, "name", "name = my cluster")),
              HasSubstr("name 'my cluster' must be"));
  EXPECT_THAT(parse_error(edit(good, "peer_gbps", "peer_gbps = -5")),
              HasSubstr("preset 'test': line"));
}

TEST(Model, ValidateChecksPresetsBuiltInCode) {
  m::Preset p = toy();
  EXPECT_NO_THROW(m::validate(p));
  p.links.nic_gbps = -1;
  try {
    m::validate(p);
    ADD_FAILURE() << "a negative bandwidth passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("links.nic_gbps = -1 is out of range"));
  }
  p = toy();
  p.device.compute_units = 0;
  EXPECT_THROW(m::validate(p), fc::InvalidArgument);
  p = toy();
  p.device.gemm_pack_rows = -2;
  try {
    m::validate(p);
    ADD_FAILURE() << "a negative gemm_pack_rows passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("device.gemm_pack_rows = -2 is out of range"));
  }
  p = toy();
  p.links.nics_per_node = p.links.gpus_per_node + 1;
  try {
    m::validate(p);
    ADD_FAILURE() << "more NICs than devices passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("links.nics_per_node = "));
    EXPECT_THAT(e.what(), HasSubstr("is out of range"));
  }
  p = toy();
  p.links.nics_per_node = -1;
  EXPECT_THROW(m::validate(p), fc::InvalidArgument);
  p = toy();
  p.device.gemm_cold_gbps = -3;
  try {
    m::validate(p);
    ADD_FAILURE() << "a negative gemm_cold_gbps passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("device.gemm_cold_gbps = -3 is out of range"));
  }
  p = toy();
  p.device.node_memory_gbps = 0;  // a preset built in code before the field existed
  try {
    m::validate(p);
    ADD_FAILURE() << "a node memory of 0 passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("device.node_memory_gbps = 0 is out of range"));
  }
  p = toy();
  p.links.put_us = -1;
  EXPECT_THROW(m::validate(p), fc::InvalidArgument);
  p = toy();
  p.links.put_cu_share = 2;
  try {
    m::validate(p);
    ADD_FAILURE() << "a CU share of 2 passed";
  } catch (const fc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("links.put_cu_share = 2 is out of range"));
  }
}
