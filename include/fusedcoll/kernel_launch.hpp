#pragma once
/// @file
/// The host side of users' fused kernels (docs/kernels.md): symmetric buffers, signals and their
/// cumulative wait targets, host copies into and out of this rank's buffers, and the launch of a
/// kernel written against fusedcoll/kernel.hpp, all on a `Communicator`. Every call is made by
/// each rank on its own host thread, like the operators; "collective" means every rank makes the
/// call, in the same order, with matching arguments.
///
/// ```
/// auto box = fusedcoll::symmetric<float>(comm, "box", n);       // collective
/// auto ready = fusedcoll::signals(comm, "ready", 1);            // named for hang reports
/// Shift::Params p{in, box, ready, fusedcoll::expect(comm, ready[0], 1), n};
/// fusedcoll::launch<Shift>(comm, 1, p);                          // collective
/// fusedcoll::download(comm, box, 0, out.data(), n);
/// ```
///
/// Backends: the emulator runs every kernel (instantiated here, in the caller's translation
/// unit, when it links fusedcoll_emu and is compiled by a host compiler); the GPU backend runs
/// the kernels its build registered; mpi/ runs none and throws `UnsupportedError`.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "fusedcoll/communicator.hpp"
#include "fusedcoll/detail/kernel_runtime.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/kernel.hpp"

#if defined(FUSEDCOLL_HAVE_EMU) && !defined(FUSEDCOLL_GPU_COMPILER)
#include "fusedcoll/detail/emu_workgroup.hpp"
#define FUSEDCOLL_KERNELS_ON_EMU 1
#endif

namespace fusedcoll {

namespace detail {

/// The backend's kernel runtime, or `UnsupportedError` naming the call.
inline KernelRuntime& kernel_runtime(Communicator& comm, const char* call) {
  KernelRuntime* rt = comm.backend().kernels();
  if (rt == nullptr)
    throw UnsupportedError(
        make_string("fusedcoll ", call,
                    ": this Communicator's backend runs no user kernels (the emulator "
                    "and the GPU backend do; docs/kernels.md, \"Backends\")"));
  return *rt;
}

template <class T>
void check_host_range(const char* call, Symmetric<T> b, std::int64_t first, std::int64_t count) {
  FC_ENFORCE(b.id >= 0, call, ": the symmetric buffer handle is not allocated (id ", b.id, ")");
  FC_ENFORCE(first >= 0 && count >= 0 && first <= b.count && count <= b.count - first, call,
             ": elements [", first, ", ", first + count, ") are outside the symmetric buffer of ",
             b.count, " elements");
}

#if defined(FUSEDCOLL_KERNELS_ON_EMU)
template <class K>
emu::WgTask emu_body(emu::WgContext& wg, const void* params) {
  return K::template run<emu::WgContext>(wg, *static_cast<const typename K::Params*>(params));
}
#endif

}  // namespace detail

/// Collective: `count` elements of `T` on every rank, named `name` (reports name it). Zero-filled
/// when first allocated; a later call with the same name and no larger count returns the same
/// buffer, contents kept. Lives as long as the backend's world.
template <class T>
Symmetric<T> symmetric(Communicator& comm, const std::string& name, std::int64_t count) {
  static_assert(std::is_trivially_copyable_v<T>, "symmetric buffers hold trivially copyable T");
  FC_ENFORCE(count >= 0 && static_cast<std::uint64_t>(count) <=
                               std::numeric_limits<std::size_t>::max() / 2 / sizeof(T),
             "symmetric '", name, "': count ", count, " is negative or too large");
  const int id = detail::kernel_runtime(comm, "symmetric")
                     .symmetric(name, static_cast<std::size_t>(count) * sizeof(T));
  return Symmetric<T>{id, count};
}

/// `count` signals named `name` (hang reports name signal i as `'name'[i]`), the same on every
/// rank because every rank reserves its signals in the same order. A later call with the same
/// name and no larger count returns the same signals. Counters start at 0 and are never reset.
inline Signals signals(Communicator& comm, const std::string& name, int count) {
  FC_ENFORCE(count >= 1, "signals '", name, "': count ", count, " must be at least 1");
  return Signals{detail::kernel_runtime(comm, "signals").signals(name, count), count};
}

/// The value this rank's `s` reaches once it has received `count` more `SignalOp::add`s of 1:
/// the target of this launch's `wait_until(s, Cmp::ge, target)`. Cumulative over the world's
/// life (counters never reset), so call it once per launch for every add the launch will make.
inline std::uint64_t expect(Communicator& comm, Signal s, std::uint64_t count) {
  return detail::kernel_runtime(comm, "expect").expect(s.slot, count);
}

/// Copies `count` elements from host memory into this rank's `dst[first, ...)`.
template <class T>
void upload(Communicator& comm, Symmetric<T> dst, std::int64_t first, const T* src,
            std::int64_t count) {
  detail::check_host_range("upload", dst, first, count);
  detail::kernel_runtime(comm, "upload")
      .upload(dst.id, static_cast<std::size_t>(first) * sizeof(T), src,
              static_cast<std::size_t>(count) * sizeof(T));
}

/// Copies this rank's `src[first, first + count)` into host memory.
template <class T>
void download(Communicator& comm, Symmetric<T> src, std::int64_t first, T* dst,
              std::int64_t count) {
  detail::check_host_range("download", src, first, count);
  detail::kernel_runtime(comm, "download")
      .download(src.id, static_cast<std::size_t>(first) * sizeof(T), dst,
                static_cast<std::size_t>(count) * sizeof(T));
}

/// The most workgroups per rank of kernel `K` that are resident together: the grid of a
/// persistent kernel whose workgroups wait for each other (a larger grid deadlocks there, and
/// the hang report names the workgroups that never became resident).
template <class K>
int max_grid(Communicator& comm) {
  return detail::kernel_runtime(comm, "max_grid").max_grid(typeid(K).name());
}

/// Collective: runs kernel `K` (a type with `static constexpr const char* name`, a trivially
/// copyable `Params` and `template <class Wg> FC_KERNEL_BODY(Wg) run(Wg&, const Params&)`) as
/// `grid` workgroups on this rank, with this rank's `params`; returns when this rank's
/// workgroups have finished (peers' may still run: read only what your kernel waited for).
/// Every rank launches the same kernel with the same grid; a launch begins after every rank's
/// earlier launches ended. Throws what a workgroup threw, `TimeoutError` for a wait that timed
/// out (naming rank, workgroup, signal and value), `ProtocolError` when the emulator's checker
/// is on and the kernel broke the protocol.
template <class K>
void launch(Communicator& comm, int grid, const typename K::Params& params) {
  static_assert(std::is_trivially_copyable_v<typename K::Params>,
                "a kernel's Params must be trivially copyable (handles, sizes, device pointers)");
  FC_ENFORCE(grid >= 1 && grid <= (1 << 20), "launch of kernel '", K::name, "': grid ", grid,
             " is outside [1, 2^20]");
  detail::KernelLaunch k;
  k.name = K::name;
  k.type = typeid(K).name();
  k.grid = grid;
  k.params = &params;
  k.params_bytes = sizeof(params);
#if defined(FUSEDCOLL_KERNELS_ON_EMU)
  k.emu_body = &detail::emu_body<K>;
#endif
  detail::kernel_runtime(comm, "launch").launch(k);
}

}  // namespace fusedcoll
