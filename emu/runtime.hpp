#pragma once
// The emulator's runtime, as its own kernels see it: workgroup coroutines (`WgTask`) and their
// device-side primitives (`WgContext`: put / store / signal / wait_until / fence / quiet), both in
// fusedcoll/detail/emu_workgroup.hpp because users' kernel bodies are instantiated over them, and
// the host side of one rank (`Rank`: symmetric allocation, signal slots, kernel launch,
// rendezvous).
//
// Memory model (docs/emulator.md): a put or store is complete when it returns (plain copies);
// `signal` is a release operation on the target slot and `wait_until` an acquire, so data put
// before a signal is visible to whoever observed that signal. `fence`/`quiet` exist for kernels
// to state intent; with every put complete on return they order nothing further.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fusedcoll/detail/emu_workgroup.hpp"
#include "fusedcoll/detail/kernel_runtime.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/model.hpp"

namespace fusedcoll::emu {

/// A kernel body: builds the coroutine of one workgroup.
using KernelBody = std::function<WgTask(WgContext&)>;

/// The host side of one rank: what an op's launcher uses. Every method that says "collective"
/// must be called by all ranks in the same order with matching arguments; a mismatch throws
/// `InvalidArgument` on every rank, and a rank that never arrives makes the others throw
/// `TimeoutError` naming it.
class Rank {
 public:
  Rank(World::State& world, int rank);
  int rank() const noexcept { return rank_; }
  int size() const noexcept;
  int compute_units() const noexcept;
  int max_resident_wgs() const noexcept;
  /// Whether the world runs in virtual time: its devices are the preset's (docs/simulation.md).
  bool virtual_time() const noexcept;

  /// Collective: every rank posts `payload` under `key`; returns all ranks' payloads (index =
  /// rank). The pointers stay valid only while their ranks stay inside the current call.
  std::vector<const void*> exchange(const std::string& key, const void* payload);
  /// Collective barrier.
  void barrier(const std::string& key);
  /// Collective: a symmetric buffer of `bytes` bytes on every rank, zero-filled. Buffers live
  /// as long as the world; `scratch` reuses one per `tag`, growing it when needed.
  SymBuffer alloc(std::size_t bytes, const std::string& tag);
  SymBuffer scratch(const std::string& tag, std::size_t bytes);
  /// This rank's bytes of `b`, for the host (uploads and downloads around a kernel).
  std::byte* local(SymBuffer b);
  /// `n` consecutive signal slots reserved for `key`; reused by later calls with the same key
  /// when large enough. Not a meeting: the ids match across ranks because every rank reserves
  /// in the same order (its op calls matched at `enter`).
  int slots(const std::string& key, int n);
  /// Host side of the cumulative-target protocol: this call will receive `count` more updates
  /// (adds of 1) on this rank's `slot`; returns the value to wait for.
  std::uint64_t expect(int slot, std::uint64_t count);
  /// The cumulative target `expect` last returned for `slot` (this call's final value).
  std::uint64_t expected(int slot) const { return expected_[slot]; }

  /// Launches a kernel of `num_wgs` workgroups on this rank's device and returns when all have
  /// finished, rethrowing the first workgroup exception. At most `max_resident_wgs` run at once.
  void launch(const std::string& name, int num_wgs, const KernelBody& body);

  /// Marks what this rank's host thread is doing, for timeout reports.
  void set_activity(const std::string& what);

  /// Starts a new op call (every op's `enter` does): for protocol checking, mailbox bytes put by
  /// earlier calls are stale from here on.
  void begin_op();

  /// Declares this op call's working set on this rank for the cost model's cache term (virtual
  /// time, `model::in_cache`): the op's own buffers, `user_bytes`, plus every scratch buffer it
  /// reserves (`scratch`) in this call after declaring; its kernels launched from here on carry
  /// the sum. A call that declares none (the fused operators, whose weights and tables the term
  /// leaves to their efficiencies) has none: every byte from memory.
  void declare_working_set(std::size_t user_bytes);

 private:
  World::State& world_;
  int rank_;
  std::vector<std::uint64_t> expected_;
  std::uint64_t op_epoch_ = 0;
  std::map<std::string, SymBuffer> scratch_;
  bool working_set_declared_ = false;
  std::size_t working_set_user_ = 0;
  std::map<std::string, std::size_t> op_scratch_;  // this call's scratch: tag -> bytes asked
};

/// The host side of users' kernels on rank `rk` (emu/kernels.cpp; fusedcoll/kernel_launch.hpp).
std::unique_ptr<fusedcoll::detail::KernelRuntime> make_kernel_runtime(World::State& world,
                                                                      Rank& rk);

}  // namespace fusedcoll::emu
