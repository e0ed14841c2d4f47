#pragma once
// The registry of users' kernels' GPU instantiations (docs/kernels.md, "On the GPU"): a kernel's
// `typeid(K).name()` (the same string in every translation unit of a program) to the entry that a
// translation unit compiled by nvcc or hipcc registered for it (gpu/kernel_register.hpp), which the
// GPU backend's launch finds there. Plain host code with the entries opaque, so the normal suite
// tests it where there is no GPU compiler (tests/gpu_kernel_registry_test.cpp).

#include <string>

namespace fusedcoll::gpu {

/// Registers `entry` (the registering unit's gpu::KernelEntry, which must outlive the program's
/// launches: a static) for the kernel whose `typeid(K).name()` is `type`; `name` is K::name. A
/// second registration of the same type keeps the first (two units may register one kernel).
/// Returns true, to initialise a static; false only when memory ran out.
bool register_kernel(const char* type, const char* name, const void* entry) noexcept;

/// The entry registered for `type`, or null.
const void* find_kernel(const char* type) noexcept;

/// `type` demangled where the ABI can, for messages.
std::string readable_type(const char* type);

/// UnsupportedError for a kernel `name` of type `type` that nothing registered: names the kernel
/// and says how to register it.
[[noreturn]] void throw_unregistered(const char* name, const char* type);

}  // namespace fusedcoll::gpu
