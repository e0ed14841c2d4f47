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
  if (const char* v = std::getenv("FUSEDCOLL_TIMEOUT")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(t > 0) || t > 1e6)
      e.problems.push_back(detail::make_string("FUSEDCOLL_TIMEOUT='", v,
                                               "' is not a number of seconds in (0, 1e6]"));
    else
      e.timeout_s = t;
  }
  if (const char* v = std::getenv("FUSEDCOLL_FUZZ_SEED")) {
    char* end = nullptr;
    const unsigned long long seed = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || v[0] == '-')
      e.problems.push_back(detail::make_string("FUSEDCOLL_FUZZ_SEED='", v,
                                               "' is not a non-negative integer"));
    else
      e.fuzz_seed = seed;
  }
  if (const char* v = std::getenv("FUSEDCOLL_TRACE")) e.trace_path = v;
  auto number = [&](const char* name, double& into, const char* what) {
    const char* v = std::getenv(name);
    if (!v) return;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= 0) || x > 1e6)
      e.problems.push_back(detail::make_string(name, "='", v, "' is not ", what, " in [0, 1e6]"));
    else
      into = x;
  };
  number("FUSEDCOLL_LINK_GBPS", e.link_gbps, "a bandwidth in GB/s");
  number("FUSEDCOLL_LINK_US", e.link_latency_us, "a latency in microseconds");
  if (const char* v = std::getenv("FUSEDCOLL_CLOCK")) {
    const std::string_view s(v);
    if (s == "virtual") e.virtual_clock = true;
    else if (s == "wall" || s.empty()) e.virtual_clock = false;
    else
      e.problems.push_back(
          detail::make_string("FUSEDCOLL_CLOCK='", s, "' is not one of wall, virtual"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_PRESET")) e.preset = v;
  if (const char* v = std::getenv("FUSEDCOLL_MPI_TRANSPORT")) {
    const std::string_view s(v);
    if (s == "auto" || s.empty()) e.mpi_transport = MpiTransport::automatic;
    else if (s == "rma") e.mpi_transport = MpiTransport::rma;
    else if (s == "p2p") e.mpi_transport = MpiTransport::p2p;
    else
      e.problems.push_back(detail::make_string("FUSEDCOLL_MPI_TRANSPORT='", s,
                                               "' is not one of auto, rma, p2p"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_MPI_HIERARCHY")) {
    const std::string_view s(v);
    if (s == "auto" || s.empty()) e.mpi_hierarchy = MpiHierarchy::automatic;
    else if (s == "off") e.mpi_hierarchy = MpiHierarchy::off;
    else if (s == "on") e.mpi_hierarchy = MpiHierarchy::on;
    else
      e.problems.push_back(detail::make_string("FUSEDCOLL_MPI_HIERARCHY='", s,
                                               "' is not one of auto, off, on"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_MPI_HOSTS")) {
    std::vector<int> hosts;
    bool ok = true;
    for (const char* p = v; *p != '\0';) {
      char* end = nullptr;
      const long h = std::strtol(p, &end, 10);
      if (end == p || h < 0 || h > 1000000 || (*end != ',' && *end != '\0')) {
        ok = false;
        break;
      }
      hosts.push_back(static_cast<int>(h));
      p = *end == ',' ? end + 1 : end;
    }
    if (ok) e.mpi_hosts = std::move(hosts);
    else
      e.problems.push_back(detail::make_string(
          "FUSEDCOLL_MPI_HOSTS='", v, "' is not a comma-separated list of host numbers"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_GPU_MODE")) {
    const std::string_view s(v);
    if (s == "single" || s.empty()) e.gpu_mode = GpuMode::single;
    else if (s == "process") e.gpu_mode = GpuMode::process;
    else
      e.problems.push_back(
          detail::make_string("FUSEDCOLL_GPU_MODE='", s, "' is not one of single, process"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_GPU_PROXY")) {
    const std::string_view s(v);
    if (s == "auto" || s.empty()) e.gpu_proxy = GpuProxy::automatic;
    else if (s == "all") e.gpu_proxy = GpuProxy::all;
    else if (s == "off") e.gpu_proxy = GpuProxy::off;
    else
      e.problems.push_back(
          detail::make_string("FUSEDCOLL_GPU_PROXY='", s, "' is not one of auto, all, off"));
  }
  if (const char* v = std::getenv("FUSEDCOLL_CHECK_PROTOCOL")) {
    const std::string_view s(v);
    if (s == "1" || s == "on") e.check_protocol = true;
    else if (s == "0" || s == "off" || s.empty()) e.check_protocol = false;
    else
      e.problems.push_back(detail::make_string("FUSEDCOLL_CHECK_PROTOCOL='", s,
                                               "' is not one of 0, 1, off, on"));
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
