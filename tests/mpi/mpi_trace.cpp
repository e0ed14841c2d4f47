// FUSEDCOLL_TRACE on the MPI backend (docs/mpi.md, "Tracing"), run by CTest under mpiexec with the
// variable set: a compressed AllReduce, an uncompressed ring AllReduce and a barrier on a
// communicator of its own, which writes each rank's trace when it is destroyed; then every rank
// reads its own file back and checks that the calls, their phases and waits are there, each
// phase inside its call. Rank 0 prints PASS when every rank's file passed (tests/mpi/CMakeLists.txt
// matches it).

#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/env.hpp"
#include "fusedcoll/mpi.hpp"

namespace fc = fusedcoll;

namespace {

struct Span {
  std::string name;
  double ts = 0, dur = 0;
};

/// Every rank's file: "t.json" -> "t.rank3.json".
std::string rank_path(const std::string& path, int rank) {
  const std::size_t dot = path.rfind('.'), slash = path.find_last_of('/');
  const std::string tag = ".rank" + std::to_string(rank);
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    return path.substr(0, dot) + tag + path.substr(dot);
  return path + tag;
}

/// The problems of this rank's trace; empty when it passes.
std::string check_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "no trace file " + path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  if (all.rfind("{\"traceEvents\":[", 0) != 0 || all.find("]}") == std::string::npos)
    return "not a trace-event JSON object: " + all.substr(0, 80);
  const std::regex span_re(
      R"re(\{"name":"([^"]*)","cat":"mpi","ph":"X","pid":\d+,"tid":\d+,"ts":(-?[0-9.]+),"dur":([0-9.]+)\})re");
  std::vector<Span> spans;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), span_re); it != std::sregex_iterator();
       ++it)
    spans.push_back({(*it)[1].str(), std::stod((*it)[2].str()), std::stod((*it)[3].str())});
  std::string problems;
  // Each phase must lie inside its call.
  auto phases_inside = [&](const std::string& call_name, std::initializer_list<const char*> phases) {
    const Span* call = nullptr;
    for (const Span& s : spans)
      if (s.name == call_name) call = &s;
    if (call == nullptr) {
      problems += " no span of the call '" + call_name + "';";
      return;
    }
    for (const char* phase : phases) {
      bool inside = false;
      for (const Span& s : spans)
        if (s.name.rfind(phase, 0) == 0 && s.ts >= call->ts && s.ts + s.dur <= call->ts + call->dur)
          inside = true;
      if (!inside) problems += " no '" + std::string(phase) + "' span inside '" + call_name + "';";
    }
  };
  phases_inside("all_reduce direct", {"exchange arguments", "amax", "encode", "put", "signal",
                                      "fold", "decode", "wait: every rank's amax table"});
  // The uncompressed ring: its in-place folds and the result's copy out of the window.
  phases_inside("all_reduce ring", {"put", "fold", "copy out"});
  bool barrier = false;
  for (const Span& s : spans) barrier = barrier || s.name == "barrier";
  if (!barrier) problems += " no barrier span;";
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string problems;
  if (fc::env().trace_path.empty()) {
    problems = "FUSEDCOLL_TRACE is not set";
  } else {
    try {
      {
        fc::Communicator comm = fc::mpi::make_communicator(MPI_COMM_WORLD);
        const std::int64_t n = 4096;
        std::vector<float> send(static_cast<std::size_t>(n)), recv(send.size());
        for (std::int64_t i = 0; i < n; ++i) send[i] = static_cast<float>(i % 17) - 8.0f;
        fc::AllReduceArgs a{send.data(), recv.data(), n, fc::DType::f32, fc::ReduceOp::sum,
                            fc::AllReduceAlgo::direct};
        a.wire.format = fc::WireFormat::fp8_e4m3;
        fc::all_reduce(comm, a);
        fc::AllReduceArgs r{send.data(), recv.data(), n, fc::DType::f32, fc::ReduceOp::sum,
                            fc::AllReduceAlgo::ring};
        fc::all_reduce(comm, r);
        fc::barrier(comm);
      }  // the communicator's runtime writes the trace here
      problems = check_trace(rank_path(fc::env().trace_path, rank));
    } catch (const std::exception& e) {
      problems = e.what();
    }
  }
  if (!problems.empty()) std::printf("rank %d: FAIL:%s\n", rank, problems.c_str());
  int ok = problems.empty() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && all_ok == size) std::printf("PASS\n");
  std::fflush(stdout);
  MPI_Finalize();
  return all_ok == size ? 0 : 1;
}
