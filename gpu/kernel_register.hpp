#pragma once
// Registration of users' kernels with the GPU backend (docs/kernels.md, "On the GPU"). A kernel
// body is a template over the workgroup; the GPU's instantiation of it (a `__global__` function,
// gpu/kernel_wg.hpp) must be compiled by nvcc or hipcc, while `fusedcoll::launch<K>` is usually
// called from host code compiled by g++ (a test, an application). The two meet by name: a
// translation unit compiled by the GPU compiler registers `K` under `typeid(K).name()` (the same
// string in every translation unit of the program), and the GPU backend's `launch` finds it there.
//
// That translation unit is one line per kernel, and CMake writes it:
//
//   fusedcoll_add_kernel(my_app HEADER my/kernel.hpp KERNELS my::Kernel [INCLUDES dir...])
//
// generates
//
//   #include "my/kernel.hpp"
//   #include "gpu/kernel_register.hpp"
//   FUSEDCOLL_GPU_KERNEL(my::Kernel);
//
// and compiles it into `my_app` (an executable or shared library: a static library would drop the
// registration's object file unless linked whole).

#include <typeinfo>

#include "gpu/kernel_registry.hpp"
#include "gpu/kernel_wg.hpp"

namespace fusedcoll::gpu {

/// The entry of `K` that FUSEDCOLL_GPU_KERNEL registers: a static, so the registry may keep its
/// address.
template <class K>
inline const KernelEntry kRegisteredEntry = entry_of<K>();

}  // namespace fusedcoll::gpu

#define FC_GPU_KERNEL_CONCAT2(a, b) a##b
#define FC_GPU_KERNEL_CONCAT(a, b) FC_GPU_KERNEL_CONCAT2(a, b)

/// Registers kernel `K` (a type written against fusedcoll/kernel.hpp) with the GPU backend: at
/// namespace scope, in a translation unit compiled by nvcc or hipcc that includes K's header,
/// followed by a semicolon. `K` may contain commas (a template's arguments).
#define FUSEDCOLL_GPU_KERNEL(...)                                                      \
  [[maybe_unused]] static const bool FC_GPU_KERNEL_CONCAT(fc_gpu_kernel_registered_,   \
                                                          __COUNTER__) =               \
      ::fusedcoll::gpu::register_kernel(typeid(__VA_ARGS__).name(), __VA_ARGS__::name, \
                                        &::fusedcoll::gpu::kRegisteredEntry<__VA_ARGS__>)
