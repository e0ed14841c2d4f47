// Users' kernels on the GPU backend (gpu/kernels.hpp): the host side of fusedcoll/kernel_launch.hpp
// for one World, launching the GPU instantiations found in the registry (gpu/kernel_registry.hpp).

#include "gpu/kernels.hpp"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "fusedcoll/detail/kernel_runtime.hpp"
#include "gpu/kernel_registry.hpp"
#include "gpu/kernel_wg.hpp"
#include "gpu/runtime.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu {

namespace {

/// The registered entry of `type`, or UnsupportedError naming kernel `name`.
const KernelEntry& entry_of_type(const char* name, const char* type) {
  const void* e = find_kernel(type);
  if (e == nullptr) throw_unregistered(name, type);
  return *static_cast<const KernelEntry*>(e);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One World's users' kernels.

namespace {

/// One symmetric buffer: every rank's copy as this process reaches it.
struct Buffer {
  std::string name;
  std::size_t bytes = 0;
  std::vector<DeviceBuffer> own;      // single mode: every rank's allocation
  int proxy_id = -1;                  // process mode: the allocation's id
  std::vector<unsigned char*> reach;  // [P]
};

}  // namespace

struct Kernels::Impl {
  Context& ctx;
  Rendezvous meet;  // single mode only
  bool process = false;
  std::mutex mu;                // the rank threads' calls (single mode)
  std::vector<Buffer> buffers;  // id = index
  std::map<std::string, int> by_name;
  std::vector<std::unique_ptr<detail::KernelRuntime>> ranks;

  Impl(Context& c, Rendezvous m, bool p) : ctx(c), meet(std::move(m)), process(p) {}

  int P() const { return ctx.world_size(); }
  /// This rank's own bytes of buffer `id`, checked.
  unsigned char* bytes_of(int rank, int id, std::size_t offset, std::size_t bytes,
                          const char* what) {
    const std::lock_guard<std::mutex> lock(mu);
    FC_ENFORCE(id >= 0 && id < static_cast<int>(buffers.size()), what, ": no symmetric buffer ",
               id);
    const Buffer& b = buffers[static_cast<std::size_t>(id)];
    FC_ENFORCE(offset <= b.bytes && bytes <= b.bytes - offset, what, ": bytes [", offset, ", ",
               offset + bytes, ") are outside symmetric buffer '", b.name, "' of ", b.bytes,
               " bytes");
    return b.reach[static_cast<std::size_t>(rank)] + offset;
  }

  /// A new buffer of every rank (single mode: called by the rendezvous's last rank).
  int allocate(const std::string& name, std::size_t bytes) {
    Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.reach.assign(static_cast<std::size_t>(P()), nullptr);
    if (!process) {
      FC_CHECK_GPU(gpuSetDevice(ctx.device()));
      for (int r = 0; r < P(); ++r) {
        DeviceBuffer& d = b.own.emplace_back(bytes);
        FC_CHECK_GPU(gpuMemset(d.get(), 0, std::max<std::size_t>(bytes, 1)));
        b.reach[static_cast<std::size_t>(r)] = d.as<unsigned char>();
      }
      FC_CHECK_GPU(gpuDeviceSynchronize());
    } else {
#if defined(FC_GPU_PROCESS)
      b.proxy_id = ctx.process()->allocate(name, bytes);
      for (int q = 0; q < P(); ++q)
        b.reach[static_cast<std::size_t>(q)] = ctx.process()->peer_allocation(b.proxy_id, q);
#endif
    }
    const std::lock_guard<std::mutex> lock(mu);
    buffers.push_back(std::move(b));
    const int id = static_cast<int>(buffers.size()) - 1;
    by_name[name] = id;
    return id;
  }

  /// The id of buffer `name` if it holds `bytes`, else -1.
  int existing(const std::string& name, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = by_name.find(name);
    if (it == by_name.end() || buffers[static_cast<std::size_t>(it->second)].bytes < bytes)
      return -1;
    return it->second;
  }

  /// The grid most workgroups of `e` per rank resident together.
  int max_grid(const KernelEntry& e) {
    return ctx.fit_blocks(e.blocks_per_sm(), std::numeric_limits<std::int32_t>::max());
  }

  /// Runs one launch: `all` holds every rank's launch (process mode: this rank's only), already
  /// checked to agree.
  void run(const std::vector<const detail::KernelLaunch*>& all) {
    const detail::KernelLaunch& k0 = *all[0];
    const KernelEntry* e = &entry_of_type(k0.name, k0.type);
    const std::string op = detail::make_string("kernel '", k0.name, "'");
    ctx.begin_call(op);
    const int ranks = static_cast<int>(all.size());
    Arena arena;
    std::vector<unsigned char> params(std::max<std::size_t>(all.size() * k0.params_bytes, 1));
    for (std::size_t r = 0; r < all.size(); ++r)
      if (k0.params_bytes > 0)
        std::memcpy(params.data() + r * k0.params_bytes, all[r]->params, k0.params_bytes);
    LaunchBuffers table(P());
    for (const Buffer& b : buffers)
      table.add(b.reach, static_cast<std::int64_t>(b.bytes), BufferRoute{b.proxy_id, 0});
    const KernelView view = table.view(ctx, arena, ranks, process);
    const void* dparams = arena.upload(params);
    try {
      ctx.start_timing();
      e->launch(k0.grid, ranks, ctx.stream(), dparams, view);
      ctx.stop_timing();
      ctx.finish(op);
    } catch (const TimeoutError& t) {
      mark_failed();
      // Workgroups beyond the resident ones wait for the blocks they wait for to end: say so.
      int most = 0;
      try {
        most = max_grid(*e);
      } catch (...) {
      }
      if (most > 0 && k0.grid > most)
        throw TimeoutError(detail::make_string(
            t.what(), "; the grid of ", k0.grid, " workgroups per rank is larger than max_grid (",
            most, " resident together): workgroups that wait for ones never resident hang"));
      throw;
    } catch (...) {
      mark_failed();
      throw;
    }
  }

  void mark_failed() noexcept {
#if defined(FC_GPU_PROCESS)
    if (process) ctx.process()->mark_failed();
#endif
  }
};

namespace {

class RankRuntime final : public detail::KernelRuntime {
 public:
  RankRuntime(Kernels::Impl& k, int rank) : k_(k), rank_(rank) {}

  int symmetric(const std::string& name, std::size_t bytes) override {
    const std::string what = detail::make_string("symmetric '", name, "' of ", bytes, " bytes");
    if (!k_.process) {
      // A meeting on every call: a rank asking for another size fails on every rank at once.
      k_.meet(rank_, what, nullptr, [&](const std::vector<const void*>&) {
        if (k_.existing(name, bytes) < 0) k_.allocate(name, bytes);
      });
      return k_.existing(name, bytes);
    }
    agree(what, "to allocate symmetric '" + name + "'");
    const int id = k_.existing(name, bytes);
    return id >= 0 ? id : k_.allocate(name, bytes);
  }

  int signals(const std::string& name, int count) override {
    const std::lock_guard<std::mutex> lock(k_.mu);
    return k_.ctx.kernel_slots(name, count);
  }

  std::uint64_t expect(int slot, std::uint64_t count) override {
    FC_ENFORCE(slot >= 0 && slot < Context::kSlotsPerRank, "expect: signal slot ", slot,
               " is not one that `signals` reserved");
    const std::lock_guard<std::mutex> lock(k_.mu);
    return k_.ctx.expect(rank_, slot, count);
  }

  void upload(int id, std::size_t offset, const void* src, std::size_t bytes) override {
    unsigned char* dst = k_.bytes_of(rank_, id, offset, bytes, "upload");
    if (bytes == 0) return;
    FC_CHECK_GPU(gpuSetDevice(k_.ctx.device()));
    FC_CHECK_GPU(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice));
  }

  void download(int id, std::size_t offset, void* dst, std::size_t bytes) override {
    const unsigned char* src = k_.bytes_of(rank_, id, offset, bytes, "download");
    if (bytes == 0) return;
    FC_CHECK_GPU(gpuSetDevice(k_.ctx.device()));
    FC_CHECK_GPU(gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToHost));
  }

  int max_grid(const char* type) override {
    const KernelEntry& e = entry_of_type("", type);
    FC_CHECK_GPU(gpuSetDevice(k_.ctx.device()));
    return k_.max_grid(e);
  }

  void launch(const detail::KernelLaunch& k) override {
    const std::string what =
        detail::make_string("launch of kernel '", k.name, "' with grid ", k.grid);
    if (!k_.process) {
      k_.meet(rank_, what, &k, [&](const std::vector<const void*>& raw) {
        std::vector<const detail::KernelLaunch*> all;
        for (const void* a : raw) all.push_back(static_cast<const detail::KernelLaunch*>(a));
        for (std::size_t r = 1; r < all.size(); ++r)
          FC_ENFORCE(std::strcmp(all[r]->type, all[0]->type) == 0 &&
                         all[r]->params_bytes == all[0]->params_bytes,
                     "launch of kernel '", k.name, "': rank ", r, " launches ",
                     readable_type(all[r]->type), " where rank 0 launches ",
                     readable_type(all[0]->type));
        k_.run(all);
      });
      return;
    }
    agree(detail::make_string(what, " (", readable_type(k.type), ", ", k.params_bytes,
                              " bytes of parameters)"),
          "to launch kernel '" + std::string(k.name) + "'");
    k_.run({&k});
  }

 private:
  /// Process mode's meeting: every rank's `what`, which must all be the same (InvalidArgument on
  /// every rank otherwise, before anything moves). It is also the barrier a launch begins after.
  void agree(const std::string& what, const std::string& why) {
#if defined(FC_GPU_PROCESS)
    const std::vector<std::string> all = k_.ctx.process()->exchange(what, why);
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] != what)
        throw InvalidArgument(
            detail::make_string("fusedcoll gpu: collective call does not match across ranks: rank ",
                                r, " called ", all[r], " while rank ", rank_, " called ", what));
#else
    (void)what;
    (void)why;
#endif
  }

  Kernels::Impl& k_;
  int rank_;
};

}  // namespace

Kernels::Kernels(Context& ctx, Rendezvous meet)
    : impl_(std::make_unique<Impl>(ctx, std::move(meet), false)) {
  for (int r = 0; r < ctx.world_size(); ++r)
    impl_->ranks.push_back(std::make_unique<RankRuntime>(*impl_, r));
}

Kernels::Kernels(Context& ctx) : impl_(std::make_unique<Impl>(ctx, Rendezvous{}, true)) {
  for (int r = 0; r < ctx.world_size(); ++r)
    impl_->ranks.push_back(r == ctx.me() ? std::make_unique<RankRuntime>(*impl_, r) : nullptr);
}

Kernels::~Kernels() = default;

detail::KernelRuntime* Kernels::rank(int rank) {
  return impl_->ranks[static_cast<std::size_t>(rank)].get();
}

}  // namespace fusedcoll::gpu
