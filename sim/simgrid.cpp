// The cluster on SimGrid S4U and the runtime that plays the ranks' programs on it
// (docs/simulation.md, "Scale-out").
//
// Platform: the root zone is a fat tree whose leaves are the nodes. A node is a full zone with
// its G devices, its K = nics_per_node NIC links (nic_gbps each, half the NIC latency each way;
// device g routes through NIC g mod K, one NIC per device by default) to the node's switch, and
// the peer links: a link per pair (mesh) or a port per device (switched), peer_gbps each, or the
// node's one memory every put inside it crosses (shared: a copy's rate, model::peer_seconds). The
// fat tree's links carry K x nic_gbps with no latency, so a transfer between nodes crosses two NIC links (nic_us in all) and the fabric, which
// is non-blocking unless tapered. Every link is split-duplex (full duplex).
//
// Network model CM02 (max-min fairness, no correction factors), cross-traffic off: a transfer
// alone on its path takes exactly latency + bytes / bandwidth, the cost model's transfer_seconds
// (sim_test checks it). SimGrid's default LV08 would multiply every latency by 13.01.
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>

#include "fusedcoll/error.hpp"
#include "sim/sim.hpp"

namespace sg4 = simgrid::s4u;

namespace fusedcoll::sim {

void check(const Cluster& c) {
  model::validate(c.preset);
  if (c.nodes < 1)
    throw InvalidArgument("cluster: nodes = " + std::to_string(c.nodes) + ": at least 1 node");
  if (c.radix < 1) throw InvalidArgument("cluster: radix = " + std::to_string(c.radix) + " < 1");
  if (c.nodes > c.radix && c.nodes % c.radix != 0)
    throw InvalidArgument("cluster: " + std::to_string(c.nodes) +
                          " nodes do not fill leaf switches of radix " + std::to_string(c.radix) +
                          " (use a multiple of the radix, or at most the radix)");
  if (!(c.taper >= 1) || std::fmod(c.radix / c.taper, 1.0) != 0)
    throw InvalidArgument("cluster: taper = " + std::to_string(c.taper) +
                          " must be >= 1 and divide the radix " + std::to_string(c.radix));
  if (static_cast<std::int64_t>(c.nodes) * c.preset.links.gpus_per_node > (1 << 20))
    throw InvalidArgument("cluster: " + std::to_string(c.ranks()) + " ranks is more than 2^20");
}

namespace {

/// One transfer as the network sees it.
struct Flow {
  double at = 0;
  int dst = 0;
  std::int64_t bytes = 0;
};

std::vector<sg4::Host*> build_platform(const Cluster& c) {
  const model::Links& L = c.preset.links;
  const int G = L.gpus_per_node;
  const int K = L.nics();
  std::vector<sg4::Host*> hosts(static_cast<std::size_t>(c.ranks()), nullptr);
  auto node = [&](sg4::NetZone* parent, const std::vector<unsigned long>&, unsigned long id)
      -> std::pair<simgrid::kernel::routing::NetPoint*, simgrid::kernel::routing::NetPoint*> {
    const std::string n = "node" + std::to_string(id);
    auto* z = sg4::create_full_zone(n);
    z->set_parent(parent);
    auto* sw = z->create_router(n + "-switch");
    std::vector<sg4::Host*> h(static_cast<std::size_t>(G));
    std::vector<sg4::Link*> port(static_cast<std::size_t>(G));
    std::vector<sg4::Link*> nics(static_cast<std::size_t>(K));
    sg4::Link* memory = nullptr;
    if (L.peer_topology == model::PeerTopology::shared) {
      // One medium in both directions: the bytes of b take model::peer_seconds(b) alone on it.
      const double rate = 1.0 / model::peer_seconds(c.preset, 1 << 20) * (1 << 20);
      memory = z->create_link(n + "-memory", rate)->set_latency(L.peer_us * 1e-6)->seal();
    }
    for (int k = 0; k < K; ++k) {
      // Named by the first device on it: with one NIC per device, "nic<rank>" as before.
      nics[k] = z->create_split_duplex_link("nic" + std::to_string(static_cast<int>(id) * G + k),
                                            L.nic_gbps * 1e9);
      nics[k]->set_latency(L.nic_us * 1e-6 / 2)->seal();
    }
    for (int g = 0; g < G; ++g) {
      const int r = static_cast<int>(id) * G + g;
      h[g] = z->create_host("gpu" + std::to_string(r), 1e9);
      hosts[static_cast<std::size_t>(r)] = h[g];
      auto* nic = nics[static_cast<std::size_t>(g % K)];
      z->add_route(h[g]->get_netpoint(), sw, nullptr, nullptr,
                   {sg4::LinkInRoute(nic, sg4::LinkInRoute::Direction::UP)}, false);
      z->add_route(sw, h[g]->get_netpoint(), nullptr, nullptr,
                   {sg4::LinkInRoute(nic, sg4::LinkInRoute::Direction::DOWN)}, false);
      if (L.peer_topology == model::PeerTopology::switched) {
        port[g] = z->create_split_duplex_link("port" + std::to_string(r), L.peer_gbps * 1e9);
        port[g]->set_latency(L.peer_us * 1e-6 / 2)->seal();
      }
    }
    for (int a = 0; a < G; ++a)
      for (int b = a + 1; b < G; ++b) {
        auto* na = h[a]->get_netpoint();
        auto* nb = h[b]->get_netpoint();
        if (memory != nullptr) {
          z->add_route(na, nb, nullptr, nullptr, {sg4::LinkInRoute(memory)}, true);
        } else if (L.peer_topology == model::PeerTopology::switched) {
          using D = sg4::LinkInRoute::Direction;
          z->add_route(na, nb, nullptr, nullptr,
                       {sg4::LinkInRoute(port[a], D::UP), sg4::LinkInRoute(port[b], D::DOWN)}, false);
          z->add_route(nb, na, nullptr, nullptr,
                       {sg4::LinkInRoute(port[b], D::UP), sg4::LinkInRoute(port[a], D::DOWN)}, false);
        } else {
          auto* l = z->create_split_duplex_link(
              "peer" + std::to_string(id * G + a) + "-" + std::to_string(id * G + b),
              L.peer_gbps * 1e9);
          l->set_latency(L.peer_us * 1e-6)->seal();
          z->add_route(na, nb, nullptr, nullptr,
                       {sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP)}, false);
          z->add_route(nb, na, nullptr, nullptr,
                       {sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::DOWN)}, false);
        }
      }
    z->seal();
    return {z->get_netpoint(), sw};
  };
  const auto N = static_cast<unsigned>(c.nodes);
  const auto radix = static_cast<unsigned>(c.radix);
  const double uplink = K * L.nic_gbps * 1e9;
  sg4::NetZone* fabric = nullptr;
  if (c.taper == 1.0) {
    // Non-blocking: the fabric never limits a flow (a node's uplink carries K x nic_gbps, all its
    // NICs), so it is left out of the routes, which keeps flows of different rails in separate
    // max-min systems (SimGrid solves only the ones a change touches).
    fabric = sg4::create_star_zone("fabric");
    for (unsigned a = 0; a < N; ++a) {
      const auto [zone, gw] = node(fabric, {}, a);
      fabric->add_route(zone, nullptr, gw, nullptr, {}, true);
    }
  } else if (N <= radix) {
    fabric = sg4::create_fatTree_zone("fabric", nullptr, sg4::FatTreeParams(1, {N}, {1}, {1}),
                                      sg4::ClusterCallbacks(node), uplink, 0,
                                      sg4::Link::SharingPolicy::SPLITDUPLEX);
  } else {
    const auto up = static_cast<unsigned>(std::lround(c.radix / c.taper));
    fabric = sg4::create_fatTree_zone("fabric", nullptr,
                                      sg4::FatTreeParams(2, {radix, N / radix}, {1, up}, {1, 1}),
                                      sg4::ClusterCallbacks(node), uplink, 0,
                                      sg4::Link::SharingPolicy::SPLITDUPLEX);
  }
  fabric->seal();
  return hosts;
}

/// A rank's program with its exchanges' sends turned into flows.
struct Prepared {
  std::vector<Step> steps;
  std::vector<std::vector<Flow>> flows;  // per exchange step
};

struct Run {
  const Cluster& c;
  const Options& o;
  int P = 0, G = 0, N = 0;
  std::vector<sg4::Host*> hosts;
  std::vector<Prepared> prog;
  std::vector<std::vector<std::int64_t>> expected;  // [exchange][rank]
  /// Per rank and exchange (or AllReduce stage): a mailbox. An exchange's receives the
  /// receiving actor posts when it starts, so every put starts the moment its sender posts it
  /// (one-sided puts into symmetric buffers); an AllReduce stage's when the rank enters it
  /// (rendezvous). Not
  /// Comm::sendto_async: SimGrid 3.32 detaches host-to-host transfers onto one list of the engine's
  /// and removes each finished one with a scan of that list, O(transfers in flight) per completion,
  /// which was ~75% of a 128-node simulation (docs/simulation.md, "Simulation cost").
  struct Inbox {
    sg4::Mailbox* box = nullptr;
    std::vector<sg4::CommPtr> recvs;
    std::size_t taken = 0;
  };
  std::vector<std::vector<Inbox>> inbox;            // [exchange][rank]
  std::vector<std::vector<std::int64_t>> expected_flows;  // [exchange][rank]
  /// Per actor, the transfers it sent: it waits for them before it ends, which leaves its
  /// recorded end as it was (SimGrid fails the transfers of an actor that has ended).
  std::vector<std::vector<sg4::CommPtr>> sent;  // [rank * 2 + (communication stream)]
  void* payload = nullptr;  // what every transfer "carries": the simulation moves no data
  void* sink = nullptr;
  std::vector<sg4::BarrierPtr> barrier;             // [node]
  std::vector<sg4::SemaphorePtr> ar_start, ar_done;
  std::vector<std::vector<std::int64_t>> ar_bytes;  // [rank]: each AllReduce's bytes
  std::vector<double> end, compute;
  std::vector<std::pair<std::string, double>> phases;  // rank 0
  std::int64_t flows = 0;

  Run(const Cluster& cl, const Options& op) : c(cl), o(op) {}

  /// The AllReduces' inboxes: [rank][allreduce][stage].
  std::vector<std::vector<std::vector<Inbox>>> ar_inbox;
  Inbox& ar_box(int r, std::size_t a, int stage) {
    return ar_inbox[static_cast<std::size_t>(r)][a][static_cast<std::size_t>(stage)];
  }
  /// Posts `count` receives on `in` from the calling actor, which is the receiver.
  void expect(Inbox& in, std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) in.recvs.push_back(in.box->get_async(&sink));
  }
  /// Sends `bytes` from the calling actor's host to the receiver of `in`.
  void post(Inbox& in, std::int64_t bytes, std::vector<sg4::CommPtr>& mine) {
    mine.push_back(in.box->put_async(&payload, static_cast<std::uint64_t>(bytes)));
    ++flows;
  }
  /// Drops the transfers of `mine` that have completed: SimGrid keeps a list of each actor's
  /// transfers and scans it whenever one of them completes, so it is kept short.
  static void reap(std::vector<sg4::CommPtr>& mine) {
    std::erase_if(mine, [](const sg4::CommPtr& c) { return c->test(); });
  }
  /// The AllReduce's receives, rendezvous: posted when the receiver enters the stage, so a
  /// stage's data flows only once both ends are in it (MPI's rendezvous protocol for large
  /// messages; a collective library's bounded buffers). Posted up front like the exchanges' puts
  /// (eager, unbounded), a partner already in stage k + 1 pushed its data into the link that still
  /// carried stage k's: the fused DLRM-DCNv2 iteration at 128 nodes, whose forward leaves the
  /// ranks staggered, took 4441.8 us against 3423.8 (docs/results/sim-where-fusion-pays.md).
  void rendezvous(Inbox& in, std::int64_t count) {
    expect(in, count);
    receive(in, count);
  }
  static void receive(Inbox& in, std::int64_t count) {
    std::vector<sg4::CommPtr> mine(in.recvs.begin() + static_cast<std::ptrdiff_t>(in.taken),
                                   in.recvs.begin() + static_cast<std::ptrdiff_t>(in.taken) + count);
    sg4::Comm::wait_all(mine);
    for (std::int64_t i = 0; i < count; ++i) in.recvs[in.taken++] = nullptr;
  }

  /// The stages of one AllReduce, each with a mailbox per rank: the intra-node reduce-scatter,
  /// the inter-node stages, the intra-node all-gather (allreduce()).
  std::size_t ar_stages() const {
    std::size_t n = G > 1 ? 2 : 0;
    if (N > 1)
      n += (N & (N - 1)) == 0 ? 2 * static_cast<std::size_t>(std::log2(N) + 0.5)
                              : 2 * static_cast<std::size_t>(N - 1);
    return n;
  }

  double device_seconds(const model::Work& total) const {
    const double cu = c.preset.device.compute_units;
    return model::seconds(c.preset, {total.kernel, total.flops / cu, total.bytes / cu});
  }

  /// The hierarchical AllReduce on rank r's communication stream: reduce-scatter inside the node,
  /// across nodes among the devices of one local index (recursive halving and doubling when N is
  /// a power of two, a ring otherwise), all-gather inside the node.
  void allreduce(int r, std::size_t a, std::int64_t S) {
    const int g = r % G, n = r / G;
    int stage = 0;
    auto reduce_cost = [&](std::int64_t bytes) {
      sg4::this_actor::sleep_for(device_seconds(model::reduce(bytes / 4)));
    };
    auto exchange = [&](int peer, std::int64_t bytes) {
      post(ar_box(peer, a, stage), bytes, sent[2 * static_cast<std::size_t>(r) + 1]);
      rendezvous(ar_box(r, a, stage), 1);
      ++stage;
    };
    const std::int64_t chunk = (S + G - 1) / G;
    if (G > 1) {
      for (int h = 0; h < G; ++h)
        if (h != g) post(ar_box(n * G + h, a, stage), chunk, sent[2 * static_cast<std::size_t>(r) + 1]);
      rendezvous(ar_box(r, a, stage), G - 1);
      reduce_cost(chunk * (G - 1));
      ++stage;
    }
    if (N > 1) {
      if ((N & (N - 1)) == 0) {
        std::int64_t size = chunk;
        std::vector<std::int64_t> sizes;
        for (int d = N / 2; d >= 1; d /= 2) {
          size = (size + 1) / 2;
          sizes.push_back(size);
          exchange((n ^ d) * G + g, size);
          reduce_cost(size);
        }
        int i = static_cast<int>(sizes.size()) - 1;
        for (int d = 1; d < N; d *= 2, --i) exchange((n ^ d) * G + g, sizes[static_cast<std::size_t>(i)]);
      } else {
        const std::int64_t piece = (chunk + N - 1) / N;
        const int next = ((n + 1) % N) * G + g;
        for (int s = 0; s < 2 * (N - 1); ++s) {
          post(ar_box(next, a, stage), piece, sent[2 * static_cast<std::size_t>(r) + 1]);
          rendezvous(ar_box(r, a, stage), 1);
          ++stage;
          if (s < N - 1) reduce_cost(piece);
        }
      }
    }
    if (G > 1) {
      for (int h = 0; h < G; ++h)
        if (h != g) post(ar_box(n * G + h, a, stage), chunk, sent[2 * static_cast<std::size_t>(r) + 1]);
      rendezvous(ar_box(r, a, stage), G - 1);
    }
  }

  void comm_stream(int r) {
    const auto R = static_cast<std::size_t>(r);
    for (std::size_t a = 0; a < ar_bytes[static_cast<std::size_t>(r)].size(); ++a) {
      ar_start[static_cast<std::size_t>(r)]->acquire();
      reap(sent[2 * R + 1]);
      allreduce(r, a, ar_bytes[static_cast<std::size_t>(r)][a]);
      ar_done[static_cast<std::size_t>(r)]->release();
    }
    sg4::Comm::wait_all(sent[2 * R + 1]);
  }

  void compute_stream(int r) {
    const auto R = static_cast<std::size_t>(r);
    for (std::size_t e = 0; e < inbox.size(); ++e) expect(inbox[e][R], expected_flows[e][R]);
    std::size_t x = 0;
    int started = 0, waited = 0;
    for (const Step& s : prog[R].steps) {
      const double t0 = sg4::Engine::get_clock();
      switch (s.kind) {
        case Step::compute:
          sg4::this_actor::sleep_for(s.seconds);
          compute[R] += s.seconds;
          break;
        case Step::exchange: {
          // The node's devices start an exchange together: its flows between nodes carry several
          // devices' sends, timed from a common start.
          reap(sent[2 * R]);
          if (G > 1 && pxn()) barrier[static_cast<std::size_t>(r / G)]->wait();
          const double start = sg4::Engine::get_clock();
          for (const Flow& f : prog[R].flows[x]) {
            sg4::this_actor::sleep_until(start + f.at);
            post(inbox[x][static_cast<std::size_t>(f.dst)], f.bytes, sent[2 * R]);
          }
          sg4::this_actor::sleep_until(start + s.seconds);
          compute[R] += s.seconds;
          const double ready = sg4::Engine::get_clock();
          receive(inbox[x][R], expected_flows[x][R]);
          // A rank that waited for its peers' bytes runs again a hand-over later where ranks
          // outnumber cores (model::handover_seconds; the emulator adds it per blocking wait).
          if (sg4::Engine::get_clock() > ready) sg4::this_actor::sleep_for(model::handover_seconds(c.preset));
          if (G > 1) barrier[static_cast<std::size_t>(r / G)]->wait();
          sg4::this_actor::sleep_for(s.after);
          compute[R] += s.after;
          ++x;
          break;
        }
        case Step::allreduce:
          ar_start[R]->release();
          ++started;
          break;
        case Step::wait_comm:
          for (; waited < started; ++waited) ar_done[R]->acquire();
          break;
      }
      if (r == 0) {
        const double dt = sg4::Engine::get_clock() - t0;
        auto it = std::find_if(phases.begin(), phases.end(),
                               [&](const auto& p) { return p.first == s.phase; });
        if (it == phases.end())
          phases.emplace_back(s.phase, dt);
        else
          it->second += dt;
      }
    }
    end[R] = sg4::Engine::get_clock();
    sg4::Comm::wait_all(sent[2 * R]);
  }

  /// The flows of one exchange for the G ranks of node `a`. Inside the node: one flow per send.
  /// Between nodes: the node's sends to node b that leave within one merge window are one flow,
  /// from the node's device (a + b) mod G to node b's device of the same index, leaving with the
  /// window's last send. Each device's NIC so carries the traffic of N/G destination nodes, the
  /// same bytes as the sender's own rail would in a balanced exchange (NCCL's PXN routes the same
  /// way); the hop to and from that device inside the node is not modelled.
  void node_flows(int a, std::vector<std::vector<Send>>& sends, std::vector<std::vector<Flow>>& out,
                  std::vector<std::int64_t>& exp) {
    std::vector<std::vector<Item>> to_node(static_cast<std::size_t>(N));
    for (int g = 0; g < G; ++g) {
      const int r = a * G + g;
      for (const Send& e : sends[static_cast<std::size_t>(g)]) {
        if (e.bytes <= 0 || e.dst == r) continue;
        if (e.dst < 0 || e.dst >= P)
          throw InvalidArgument("sim: send to rank " + std::to_string(e.dst) + " of " +
                                std::to_string(P));
        const int b = e.dst / G;
        if (b == a) {
          out[static_cast<std::size_t>(g)].push_back({e.at, e.dst, e.bytes});
          exp[static_cast<std::size_t>(e.dst)] += e.bytes;
        } else {
          to_node[static_cast<std::size_t>(b)].push_back({e, r});
        }
      }
    }
    if (!pxn()) {
      // Each device's own rail: its sends to node b (merged within a window) go to b's device of
      // its local index.
      for (int b = 0; b < N; ++b)
        for (int g = 0; g < G; ++g) {
          std::vector<Item> v;
          for (const Item& it : to_node[static_cast<std::size_t>(b)])
            if (it.src == a * G + g) v.push_back(it);
          if (v.empty()) continue;
          std::stable_sort(v.begin(), v.end(), [](const Item& x, const Item& y) { return x.s.at < y.s.at; });
          merge(v, g, b * G + g, out, exp);
        }
    } else {
      for (int b = 0; b < N; ++b) {
        auto& v = to_node[static_cast<std::size_t>(b)];
        if (v.empty()) continue;
        std::stable_sort(v.begin(), v.end(), [](const Item& x, const Item& y) { return x.s.at < y.s.at; });
        const int rail = (a + b) % G;
        merge(v, rail, b * G + rail, out, exp);
      }
    }
    for (auto& f : out)
      std::stable_sort(f.begin(), f.end(), [](const Flow& x, const Flow& y) { return x.at < y.at; });
  }

  /// Node-level flows (PXN) once a node has enough destination nodes to spread them evenly over
  /// its G NICs (at most 1/4 of a flow's bytes above the mean per NIC); below, every device's own
  /// rail.
  bool pxn() const { return N - 1 >= 4 * G; }

  struct Item {
    Send s;
    int src;
  };
  /// Sends sorted by time to one destination, cut into flows of one merge window each.
  void merge(const std::vector<Item>& v, int issuer, int dst, std::vector<std::vector<Flow>>& out,
             std::vector<std::int64_t>& exp) const {
    double opened = v.front().s.at;
    Flow f{v.front().s.at, dst, 0};
    for (const Item& it : v) {
      if (it.s.at - opened > o.merge_window) {
        out[static_cast<std::size_t>(issuer)].push_back(f);
        opened = it.s.at;
        f = Flow{it.s.at, dst, 0};
      }
      f.at = it.s.at;
      f.bytes += it.s.bytes;
      exp[static_cast<std::size_t>(dst)] += it.s.bytes;
    }
    out[static_cast<std::size_t>(issuer)].push_back(f);
  }
};

}  // namespace

Result simulate(const Cluster& c, const std::function<Program(int)>& program, const Options& o) {
  check(c);
  if (!(o.time_precision > 0) || !(o.merge_window >= 0))
    throw InvalidArgument("sim: time precision must be > 0 and the merge window >= 0");
  const std::clock_t w0 = std::clock();
  Run run(c, o);
  run.G = c.preset.links.gpus_per_node;
  run.N = c.nodes;
  run.P = c.ranks();
  const auto P = static_cast<std::size_t>(run.P);
  run.prog.resize(P);
  run.ar_bytes.resize(P);
  std::size_t exchanges = 0;
  for (int r = 0; r < run.P; ++r) {
    Program p = program(r);
    std::size_t x = 0;
    for (const Step& s : p) {
      if (s.kind == Step::exchange) ++x;
      else if (s.kind == Step::allreduce) run.ar_bytes[static_cast<std::size_t>(r)].push_back(s.bytes);
      if (!(s.seconds >= 0) || !(s.after >= 0))
        throw InvalidArgument("sim: step '" + s.phase + "' has a negative or NaN duration");
    }
    if (r > 0 && x != exchanges)
      throw InvalidArgument("sim: rank " + std::to_string(r) + " has " + std::to_string(x) +
                            " exchanges, rank 0 has " + std::to_string(exchanges));
    exchanges = x;
    run.prog[static_cast<std::size_t>(r)].steps = std::move(p);
    run.prog[static_cast<std::size_t>(r)].flows.resize(exchanges);
  }
  if (c.preset.links.nic_cpu_gbps > 0) {
    // The network stack's CPU cost (model::nic_cpu_seconds, as the emulator books it): the bytes
    // an exchange sends across nodes hold the sender's kernel that much longer, those it receives
    // the receiver's unpack. Coarser than the emulator, which books each put's at both ends as
    // it happens; the AllReduce's stages carry no such cost here.
    std::vector<std::vector<double>> in(exchanges, std::vector<double>(P, 0.0));
    for (int r = 0; r < run.P; ++r) {
      std::size_t x = 0;
      for (Step& s : run.prog[static_cast<std::size_t>(r)].steps) {
        if (s.kind != Step::exchange) continue;
        for (const Send& snd : s.sends) {
          const double cpu = model::nic_cpu_seconds(c.preset, r, snd.dst, snd.bytes);
          s.seconds += cpu;
          in[x][static_cast<std::size_t>(snd.dst)] += cpu;
        }
        ++x;
      }
    }
    for (int r = 0; r < run.P; ++r) {
      std::size_t x = 0;
      for (Step& s : run.prog[static_cast<std::size_t>(r)].steps)
        if (s.kind == Step::exchange) s.after += in[x++][static_cast<std::size_t>(r)];
    }
  }
  run.expected.assign(exchanges, std::vector<std::int64_t>(P, 0));
  run.expected_flows.assign(exchanges, std::vector<std::int64_t>(P, 0));
  for (int a = 0; a < run.N; ++a) {
    std::vector<std::size_t> at(static_cast<std::size_t>(run.G), 0);  // each rank's step index
    for (std::size_t x = 0; x < exchanges; ++x) {
      std::vector<std::vector<Send>> sends(static_cast<std::size_t>(run.G));
      std::vector<std::vector<Flow>> flows(static_cast<std::size_t>(run.G));
      for (int g = 0; g < run.G; ++g) {
        auto& steps = run.prog[static_cast<std::size_t>(a * run.G + g)].steps;
        auto& i = at[static_cast<std::size_t>(g)];
        while (steps[i].kind != Step::exchange) ++i;
        sends[static_cast<std::size_t>(g)].swap(steps[i].sends);
        ++i;
      }
      run.node_flows(a, sends, flows, run.expected[x]);
      for (const auto& fl : flows)
        for (const Flow& f : fl) ++run.expected_flows[x][static_cast<std::size_t>(f.dst)];
      for (int g = 0; g < run.G; ++g)
        run.prog[static_cast<std::size_t>(a * run.G + g)].flows[x] = std::move(flows[static_cast<std::size_t>(g)]);
    }
  }

  int argc = 1;
  char name[] = "fusedcoll-sim";
  char* argv[] = {name, nullptr};
  sg4::Engine e(&argc, argv);
  xbt_log_control_set("root.thresh:critical");
  e.set_config("network/model:" + o.network_model);
  e.set_config("network/crosstraffic:0");
  // No TCP window bound (gamma / 2 latency: 1 TB/s at 2 us), which a `shared` node's memory
  // exceeds: a transfer alone takes the cost model's time at any rate.
  e.set_config("network/TCP-gamma:0");
  e.set_config("contexts/stack-size:128");
  // Completions within this many seconds are one event: the max-min system is solved once for
  // them, not once each (a 128-node exchange ends in thousands of near-simultaneous completions).
  std::ostringstream precision;
  precision << o.time_precision;
  e.set_config("surf/precision:" + precision.str());
  run.hosts = build_platform(c);
  run.end.assign(P, 0);
  run.sent.resize(2 * P);
  run.compute.assign(P, 0);
  const std::size_t stages = run.ar_stages();
  run.ar_inbox.resize(P);
  for (std::size_t r = 0; r < P; ++r) {
    run.ar_inbox[r].resize(run.ar_bytes[r].size());
    for (std::size_t a = 0; a < run.ar_inbox[r].size(); ++a) {
      run.ar_inbox[r][a].resize(stages);
      for (std::size_t st = 0; st < stages; ++st)
        run.ar_inbox[r][a][st].box = sg4::Mailbox::by_name("ar" + std::to_string(r) + "." +
                                                           std::to_string(a) + "." + std::to_string(st));
    }
  }
  run.inbox.resize(exchanges);
  for (std::size_t x = 0; x < exchanges; ++x) {
    run.inbox[x].resize(P);
    for (std::size_t r = 0; r < P; ++r)
      run.inbox[x][r].box = sg4::Mailbox::by_name("x" + std::to_string(x) + "." + std::to_string(r));
  }
  for (int n = 0; n < run.N; ++n) run.barrier.push_back(sg4::Barrier::create(static_cast<unsigned>(run.G)));
  for (std::size_t r = 0; r < P; ++r) {
    run.ar_start.push_back(sg4::Semaphore::create(0));
    run.ar_done.push_back(sg4::Semaphore::create(0));
  }
  for (int r = 0; r < run.P; ++r) {
    auto* h = run.hosts[static_cast<std::size_t>(r)];
    sg4::Actor::create("rank" + std::to_string(r), h, [&run, r] { run.compute_stream(r); });
    if (!run.ar_bytes[static_cast<std::size_t>(r)].empty())
      sg4::Actor::create("comm" + std::to_string(r), h, [&run, r] { run.comm_stream(r); });
  }
  e.run();
  Result res;
  for (std::size_t r = 0; r < P; ++r) {
    res.iteration = std::max(res.iteration, run.end[r]);
    res.compute = std::max(res.compute, run.compute[r]);
  }
  res.exposed = res.iteration - res.compute;
  res.phases = run.phases;
  res.flows = run.flows;
  res.wall = static_cast<double>(std::clock() - w0) / CLOCKS_PER_SEC;
  return res;
}

double simulate_transfer(const Cluster& c, int src, int dst, std::int64_t bytes, const Options& o) {
  const Result r = simulate(
      c,
      [&](int rank) {
        Step s;
        s.kind = Step::exchange;
        s.phase = "transfer";
        if (rank == src) s.sends.push_back({0, dst, bytes});
        return Program{s};
      },
      o);
  return r.iteration;
}

Result run_isolated(const std::function<Result()>& fn) {
  std::fflush(nullptr);  // or the child would write the parent's buffered output again
  int fd[2];
  if (pipe(fd) != 0) throw BackendError(std::string("sim: pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw BackendError(std::string("sim: fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fd[0]);
    std::ostringstream out;
    out.precision(17);
    try {
      const Result r = fn();
      out << "ok " << r.iteration << ' ' << r.compute << ' ' << r.exposed << ' ' << r.flows << ' '
          << r.wall << ' ' << r.phases.size() << '\n';
      for (const auto& [n, t] : r.phases) out << n << ' ' << t << '\n';
    } catch (const std::exception& ex) {
      out << "error " << ex.what();
    }
    const std::string s = out.str();
    std::size_t done = 0;
    while (done < s.size()) {
      const ssize_t k = write(fd[1], s.data() + done, s.size() - done);
      if (k <= 0) break;
      done += static_cast<std::size_t>(k);
    }
    close(fd[1]);
    _exit(0);  // a forked child of a possibly threaded parent leaves without running destructors
  }
  close(fd[1]);
  std::string text;
  char buf[4096];
  for (ssize_t k; (k = read(fd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(k));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::istringstream in(text);
  std::string tag;
  in >> tag;
  if (tag == "error") {
    std::string msg;
    std::getline(in, msg);
    throw InvalidArgument(msg.empty() ? "sim: failed" : msg.substr(1));
  }
  if (tag != "ok")
    throw BackendError("sim: the simulation process ended without a result (status " +
                       std::to_string(status) + ")");
  Result r;
  std::size_t n = 0;
  in >> r.iteration >> r.compute >> r.exposed >> r.flows >> r.wall >> n;
  for (std::size_t i = 0; i < n; ++i) {
    std::string name;
    double t = 0;
    in >> name >> t;
    r.phases.emplace_back(name, t);
  }
  return r;
}

}  // namespace fusedcoll::sim
