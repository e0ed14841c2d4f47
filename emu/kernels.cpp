// Users' kernels on the emulator (fusedcoll/kernel_launch.hpp, docs/kernels.md): the host side of
// one rank, on the runtime its own operators use. A user's kernel body is instantiated over
// `WgContext` in the caller's translation unit and reaches here as a function pointer; from then
// on it is a kernel like the built-in ones: fuzzed, protocol-checked, traced, in virtual time,
// and named in hang reports.

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "emu/runtime.hpp"
#include "emu/state.hpp"
#include "fusedcoll/detail/kernel_runtime.hpp"

namespace fusedcoll::emu {
namespace {

class EmuKernels final : public fusedcoll::detail::KernelRuntime {
 public:
  EmuKernels(World::State& world, Rank& rk) : world_(world), rk_(rk) {}

  int symmetric(const std::string& name, std::size_t bytes) override {
    // A meeting on every call, so that a rank asking for another size fails on every rank at
    // once; all ranks then agree on whether the buffer must grow.
    rk_.exchange(fusedcoll::detail::make_string("symmetric '", name, "' ", bytes, " bytes"),
                 nullptr);
    auto it = buffers_.find(name);
    if (it == buffers_.end() || it->second.bytes < bytes)
      it = buffers_.insert_or_assign(name, rk_.alloc(bytes, name)).first;
    return it->second.id;
  }

  int signals(const std::string& name, int count) override { return rk_.slots(name, count); }

  std::uint64_t expect(int slot, std::uint64_t count) override {
    FC_ENFORCE(slot >= 0 && slot < kSlotsPerDevice, "expect: signal slot ", slot,
               " is not one that `signals` reserved");
    return rk_.expect(slot, count);
  }

  void upload(int id, std::size_t offset, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(bytes_of(id, offset, bytes, "upload"), src, bytes);
  }

  void download(int id, std::size_t offset, void* dst, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, bytes_of(id, offset, bytes, "download"), bytes);
  }

  int max_grid(const char*) override { return rk_.max_resident_wgs(); }

  void launch(const fusedcoll::detail::KernelLaunch& k) override {
    if (k.emu_body == nullptr)
      throw UnsupportedError(fusedcoll::detail::make_string(
          "fusedcoll emu: kernel '", k.name,
          "' has no emulator instantiation: the translation "
          "unit that launched it was compiled by a GPU compiler or without fusedcoll_emu"));
    // Each launch is one call for the protocol checker: bytes an earlier launch put are stale.
    rk_.begin_op();
    rk_.set_activity(fusedcoll::detail::make_string("launching kernel '", k.name, "'"));
    rk_.exchange(
        fusedcoll::detail::make_string("launch of kernel '", k.name, "' with grid ", k.grid),
        nullptr);
    rk_.launch(k.name, k.grid, [&k](WgContext& wg) -> WgTask { return k.emu_body(wg, k.params); });
    rk_.set_activity(fusedcoll::detail::make_string("returned from kernel '", k.name, "'"));
  }

 private:
  std::byte* bytes_of(int id, std::size_t offset, std::size_t bytes, const char* what) {
    std::size_t size = 0;
    {
      std::lock_guard lock(world_.mem_mu);
      FC_ENFORCE(id >= 0 && id < static_cast<int>(world_.buffers.size()), what,
                 ": no symmetric buffer ", id);
      size = world_.buffers[id].bytes;
    }
    FC_ENFORCE(offset <= size && bytes <= size - offset, what, ": bytes [", offset, ", ",
               offset + bytes, ") are outside symmetric buffer ", world_.buffer_name(id), " of ",
               size, " bytes");
    return world_.buffer(SymBuffer{id, size}, rk_.rank()) + offset;
  }

  World::State& world_;
  Rank& rk_;
  std::map<std::string, SymBuffer> buffers_;
};

}  // namespace

std::unique_ptr<fusedcoll::detail::KernelRuntime> make_kernel_runtime(World::State& world,
                                                                      Rank& rk) {
  return std::make_unique<EmuKernels>(world, rk);
}

}  // namespace fusedcoll::emu
