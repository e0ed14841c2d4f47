#pragma once
// The Chrome/Perfetto trace file (FUSEDCOLL_TRACE) that the emulator and the MPI backend write,
// in one format so that one figure script (scripts/trace-to-png.py) and Perfetto read both.

#include <string>
#include <utility>
#include <vector>

namespace fusedcoll::detail {

/// One complete ("X") event: `name` on track `tid` of process `pid`, from `ts_us` for `dur_us`.
struct TraceEvent {
  std::string name;
  const char* category = "";
  int pid = 0;
  int tid = 0;
  double ts_us = 0;
  double dur_us = 0;
};

/// A process's or a track's display name (a `process_name` or `thread_name` metadata event;
/// `tid` is ignored for a process).
struct TraceName {
  int pid = 0;
  int tid = 0;
  std::string name;
};

/// Writes `events` to `path` after the processes' and tracks' names. A trace is a debugging aid
/// written at teardown: a file that cannot be written is reported on stderr, not thrown.
void write_chrome_trace(const std::string& path, const std::vector<TraceName>& processes,
                        const std::vector<TraceName>& tracks,
                        const std::vector<TraceEvent>& events) noexcept;

}  // namespace fusedcoll::detail
