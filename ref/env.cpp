// The one place that reads FUSEDCOLL_* variables (see env.hpp and docs/configuration.md).

#include "fusedcoll/env.hpp"

#include <cstdlib>
#include <string_view>

#include "fusedcoll/error.hpp"

namespace fusedcoll {

Env Env::from_environment() {
  Env e;
  if (const char* v = std::getenv("FUSEDCOLL_KERNEL_ISA")) {
    const std::string_view s(v);
    if (s == "auto" || s.empty()) e.kernel_isa = KernelIsa::automatic;
    else if (s == "base") e.kernel_isa = KernelIsa::base;
    else if (s == "avx2") e.kernel_isa = KernelIsa::avx2;
    else if (s == "avx512") e.kernel_isa = KernelIsa::avx512;
    else
      e.problems.push_back(detail::make_string("FUSEDCOLL_KERNEL_ISA='", s,
                                               "' is not one of auto, base, avx2, avx512"));
  }
  return e;
}

const Env& env() noexcept {
  static const Env parsed = Env::from_environment();
  return parsed;
}

void enforce_env() {
  const auto& problems = env().problems;
  if (problems.empty()) return;
  std::string text = "invalid fusedcoll environment:";
  for (const auto& p : problems) text += "\n  " + p;
  throw InvalidArgument(text);
}

}  // namespace fusedcoll
