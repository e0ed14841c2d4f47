// The registry of users' kernels' GPU instantiations (gpu/kernel_registry.hpp).

#include "gpu/kernel_registry.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "fusedcoll/error.hpp"

namespace fusedcoll::gpu {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, const void*> entries;
};

Registry& registry() {
  static Registry r;  // made on first use: registrations run during static initialisation
  return r;
}

}  // namespace

bool register_kernel(const char* type, const char* name, const void* entry) noexcept {
  (void)name;
  try {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    r.entries.try_emplace(type, entry);
  } catch (...) {
    return false;  // out of memory at static initialisation: the launch reports it unregistered
  }
  return true;
}

const void* find_kernel(const char* type) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.entries.find(type);
  return it == r.entries.end() ? nullptr : it->second;
}

std::string readable_type(const char* type) {
  int status = 0;
  char* d = abi::__cxa_demangle(type, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : type;
  std::free(d);
  return out;
}

void throw_unregistered(const char* name, const char* type) {
  const std::string t = readable_type(type);
  throw UnsupportedError(detail::make_string(
      "fusedcoll gpu: kernel ", *name != '\0' ? detail::make_string("'", name, "' (", t, ")") : t,
      " has no GPU instantiation in this program: register it in a file compiled by nvcc or "
      "hipcc, with CMake's fusedcoll_add_kernel(<target> HEADER <its header> KERNELS ",
      t, ") or the line FUSEDCOLL_GPU_KERNEL(", t, "); (docs/kernels.md, \"On the GPU\")"));
}

}  // namespace fusedcoll::gpu
