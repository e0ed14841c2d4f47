// The collectives in process mode (gpu/collective_process.hpp).

#include "gpu/collective_process.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::gpu::coll {
namespace {

std::int64_t align256(std::int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

Plan process_plan(std::span<const AllReduceArgs> all) {
  return plan_all_reduce(all, Reach::process);
}
Plan process_plan(std::span<const ReduceScatterArgs> all) {
  return plan_reduce_scatter(all, Reach::process);
}
// The exchanges read only their own rank's buffers in either mode: the same plans.
Plan process_plan(std::span<const AllGatherArgs> all) {
  Plan p = plan_all_gather(all);
  p.reach = Reach::process;
  return p;
}
Plan process_plan(std::span<const BroadcastArgs> all) {
  Plan p = plan_broadcast(all);
  p.reach = Reach::process;
  return p;
}

Plan process_plan(std::span<const AllToAllvArgs> all) {
  // A peer's displacements are its own (neither agreed nor exchanged); the plan forms addresses
  // of its blocks only for the transfers that peer makes itself, so zeros do.
  std::vector<AllToAllvArgs> known(all.begin(), all.end());
  for (AllToAllvArgs& a : known) {
    if (a.send_displs.size() != a.send_counts.size()) a.send_displs.assign(a.send_counts.size(), 0);
    if (a.recv_displs.size() != a.recv_counts.size()) a.recv_displs.assign(a.recv_counts.size(), 0);
  }
  Plan p = plan_all_to_allv(known);
  p.reach = Reach::process;
  return p;
}

HeapLayout heap_layout(const Plan& plan) {
  HeapLayout l;
  for (int b = 0; b < kNumBufs; ++b) {
    const auto& sizes = plan.buf_bytes[static_cast<std::size_t>(b)];
    const std::int64_t most = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
    l.offset[static_cast<std::size_t>(b)] = l.bytes;
    l.bytes += align256(most);
  }
  return l;
}

ProcessResolved resolve_process(const Plan& plan, int me, const HeapLayout& layout,
                                const std::vector<unsigned char*>& heap,
                                const std::vector<bool>& proxied, int slot0,
                                const std::function<std::uint64_t(int)>& target) {
  const int P = plan.P;
  FC_CHECK_INTERNAL(plan.reach == Reach::process, "fusedcoll gpu: ", plan.name,
                    ": process mode runs plans built for it (Reach::process)");
  FC_CHECK_INTERNAL(me >= 0 && me < P && static_cast<int>(heap.size()) == P &&
                        static_cast<int>(proxied.size()) == P,
                    "fusedcoll gpu: ", plan.name, ": rank ", me, " of ", P, " with ", heap.size(),
                    " heaps and ", proxied.size(), " routes");
  auto addr = [&](const Place& at) {
    return heap[static_cast<std::size_t>(at.rank)] +
           layout.offset[static_cast<std::size_t>(at.buf)] + at.offset;
  };
  auto width = [&](Access a) {
    return static_cast<std::int32_t>(a == Access::wire ? wire_size(plan.wire.format) : plan.elem);
  };
  ProcessResolved out;
  Resolved& x = out.x;
  x.step_begin.assign(static_cast<std::size_t>(P) + 1, 0);
  const auto& mine = plan.steps[static_cast<std::size_t>(me)];
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const Step& s = mine[i];
    XStep xs{};
    xs.wait_slot = s.wait_slot >= 0 ? slot0 + s.wait_slot : -1;
    xs.wait_target = s.wait_slot >= 0 ? target(s.wait_slot) : 0;
    xs.n = s.n;
    xs.src_begin = static_cast<int>(x.sources.size());
    xs.src_count = s.src_count;
    for (int k = s.src_begin; k < s.src_begin + s.src_count; ++k) {
      const Source& src = plan.sources[static_cast<std::size_t>(k)];
      // A proxied peer's memory cannot be read, and an IPC peer's is not known to be ready.
      FC_CHECK_INTERNAL(src.at.rank == me, "fusedcoll gpu: ", plan.name, ": rank ", me, " step ", i,
                        " reads rank ", src.at.rank, "'s buffer ", static_cast<int>(src.at.buf),
                        " (not a process-mode plan)");
      x.sources.push_back(
          {addr(src.at), static_cast<std::uint8_t>(src.access), src.predivide, src.index0});
    }
    xs.dst_begin = static_cast<int>(x.targets.size());
    xs.dst_count = s.dst_count;
    for (int k = s.dst_begin; k < s.dst_begin + s.dst_count; ++k) {
      const Target& t = plan.targets[static_cast<std::size_t>(k)];
      // A peer learns of bytes only through the signal that follows them, to it: a put nobody
      // waits for could land after the peer's download, and one signalled to a third rank is
      // not ordered after it by the proxy.
      FC_CHECK_INTERNAL(t.at.rank == me || (t.signal_slot >= 0 && t.signal_rank == t.at.rank),
                        "fusedcoll gpu: ", plan.name, ": rank ", me, " step ", i, " writes rank ",
                        t.at.rank, "'s buffer without signalling it");
      x.targets.push_back({addr(t.at), static_cast<std::uint8_t>(t.access), t.index0, t.signal_rank,
                           t.signal_slot >= 0 ? slot0 + t.signal_slot : -1});
      XPut u{0, -1, 0};
      if (t.at.rank != me && proxied[static_cast<std::size_t>(t.at.rank)])
        u = {static_cast<std::uint64_t>(layout.offset[static_cast<std::size_t>(t.at.buf)] +
                                        t.at.offset),
             t.at.rank, width(t.access)};
      out.puts.push_back(u);
    }
    xs.divide = s.divide;
    xs.move = is_move(plan, s);
    x.steps.push_back(xs);
  }
  for (int r = me + 1; r <= P; ++r)
    x.step_begin[static_cast<std::size_t>(r)] = static_cast<int>(x.steps.size());
  return out;
}

std::vector<AmaxRun> amax_runs_of(const Plan& plan, int me) {
  std::vector<AmaxRun> runs;
  for (const AmaxRun& r : plan.amax_runs)
    if (r.rank == me) runs.push_back(r);
  return runs;
}

std::string amax_bytes(const std::vector<std::uint32_t>& bits) {
  std::string out(bits.size() * sizeof(std::uint32_t), '\0');
  if (!bits.empty()) std::memcpy(out.data(), bits.data(), out.size());
  return out;
}

std::vector<float> merge_amax(const std::vector<std::string>& tables) {
  FC_CHECK_INTERNAL(!tables.empty(), "fusedcoll gpu: no amax tables to merge");
  const std::size_t bytes = tables.front().size();
  std::vector<std::uint32_t> most(bytes / sizeof(std::uint32_t), 0);
  for (std::size_t r = 0; r < tables.size(); ++r) {
    FC_CHECK_INTERNAL(tables[r].size() == bytes && bytes % sizeof(std::uint32_t) == 0,
                      "fusedcoll gpu: rank ", r, "'s amax table has ", tables[r].size(),
                      " bytes, rank 0's ", bytes);
    for (std::size_t k = 0; k < most.size(); ++k) {
      std::uint32_t v = 0;
      std::memcpy(&v, tables[r].data() + k * sizeof v, sizeof v);
      most[k] = std::max(most[k], v);
    }
  }
  std::vector<float> table(most.size());
  for (std::size_t k = 0; k < most.size(); ++k) table[k] = std::bit_cast<float>(most[k]);
  return table;
}

}  // namespace fusedcoll::gpu::coll
