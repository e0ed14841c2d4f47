#pragma once
/// @file
/// What a backend implements to run users' kernels (fusedcoll/kernel_launch.hpp is the user's
/// side): symmetric memory, signals and their cumulative targets, and the launch of a type-erased
/// kernel. `Backend::kernels()` returns it, or null where the backend runs no user kernels (mpi:
/// docs/kernels.md, "Backends"). One per rank, called only by that rank's host thread.

#include <cstddef>
#include <cstdint>
#include <string>

namespace fusedcoll::emu {
class WgTask;
class WgContext;
}  // namespace fusedcoll::emu

namespace fusedcoll::detail {

/// One launch of a user's kernel `K`, erased for the backend.
struct KernelLaunch {
  /// `K::name`: reports and traces name the kernel by it.
  const char* name = "";
  /// `typeid(K).name()`: the key under which a GPU build registered its instantiation of `K`
  /// (the same string in every translation unit of a program).
  const char* type = "";
  /// Workgroups per rank.
  int grid = 1;
  /// This rank's `K::Params` (trivially copyable), valid for the call.
  const void* params = nullptr;
  std::size_t params_bytes = 0;
  /// The emulator's instantiation of `K::run`, made in the caller's translation unit; null where
  /// that unit could not make it (compiled by a GPU compiler, or without fusedcoll_emu).
  emu::WgTask (*emu_body)(emu::WgContext& wg, const void* params) = nullptr;
};

/// The host side of users' kernels on one rank of a backend.
class KernelRuntime {
 public:
  virtual ~KernelRuntime() = default;
  /// Collective: this rank's copy of symmetric buffer `name`, at least `bytes` long, the same id
  /// on every rank; zero-filled when first allocated, kept (contents too) by later calls with the
  /// same name and no more bytes. A call that does not match on every rank throws
  /// `InvalidArgument` there.
  virtual int symmetric(const std::string& name, std::size_t bytes) = 0;
  /// `count` consecutive signal slots named `name`, the same on every rank (reserved in the same
  /// order on every rank); returns the first.
  virtual int signals(const std::string& name, int count) = 0;
  /// The cumulative value `slot` reaches once it has received `count` more adds of 1.
  virtual std::uint64_t expect(int slot, std::uint64_t count) = 0;
  /// Host copies into and out of this rank's bytes `[offset, offset + bytes)` of buffer `id`.
  virtual void upload(int id, std::size_t offset, const void* src, std::size_t bytes) = 0;
  virtual void download(int id, std::size_t offset, void* dst, std::size_t bytes) = 0;
  /// The most workgroups per rank of `k` (of type key `type`) that are resident together.
  virtual int max_grid(const char* type) = 0;
  /// Collective: runs `k` on this rank, returning when this rank's workgroups have finished.
  virtual void launch(const KernelLaunch& k) = 0;
};

}  // namespace fusedcoll::detail
