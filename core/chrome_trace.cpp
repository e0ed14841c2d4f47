#include "fusedcoll/detail/chrome_trace.hpp"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <string_view>

namespace fusedcoll::detail {
namespace {

// Names come from op and kernel names and peers' numbers; escaping keeps a stray quote from
// breaking the whole file.
void put_string(std::ostream& out, std::string_view s) {
  out << '"';
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20)
      out << ' ';
    else
      out << c;
  }
  out << '"';
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<TraceName>& processes,
                        const std::vector<TraceName>& tracks,
                        const std::vector<TraceEvent>& events) noexcept {
  try {
    std::ofstream out(path);
    // Microsecond timestamps with fixed decimals: the default 6 significant digits would merge
    // adjacent events after 0.1 s and turn later ones into exponents.
    out << std::fixed << std::setprecision(3) << "{\"traceEvents\":[";
    const char* sep = "\n";
    for (const TraceName& p : processes) {
      out << sep << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << p.pid << ",\"args\":{\"name\":";
      put_string(out, p.name);
      out << "}}";
      sep = ",\n";
    }
    for (const TraceName& t : tracks) {
      out << sep << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << t.pid << ",\"tid\":" << t.tid
          << ",\"args\":{\"name\":";
      put_string(out, t.name);
      out << "}}";
      sep = ",\n";
    }
    for (const TraceEvent& e : events) {
      out << sep << "{\"name\":";
      put_string(out, e.name);
      out << ",\"cat\":";
      put_string(out, e.category);
      out << ",\"ph\":\"X\",\"pid\":" << e.pid << ",\"tid\":" << e.tid << ",\"ts\":" << e.ts_us
          << ",\"dur\":" << e.dur_us << "}";
      sep = ",\n";
    }
    out << "\n]}\n";
    out.flush();
    if (!out) std::fprintf(stderr, "fusedcoll: cannot write trace to '%s'\n", path.c_str());
  } catch (...) {
    std::fprintf(stderr, "fusedcoll: cannot write trace to '%s'\n", path.c_str());
  }
}

}  // namespace fusedcoll::detail
