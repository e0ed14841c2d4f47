// The session of the torch extension: the process's MPI communicator (fusedcoll.init), and the
// emulator runs of fusedcoll.run, whose ranks are Python threads.
//
// An emulated rank's calls run on the host thread `emu::World::run` gave that rank, not on the
// Python thread that made them: the Python thread posts the call to its rank and waits (PyTorch
// has released the GIL around the operator). A call that fails raises in the Python thread, as it
// would throw in C++ SPMD code, and the rank may go on (fusedcoll reports argument errors on every
// rank before any data moves). When an exception escapes the rank's Python function, `_emu_detach`
// ends the rank's `per_rank` body with it, and `World::run` aborts every other rank's waits, as
// for C++ code; a timeout or a kernel failure aborts the World by itself. Nothing waits without
// the World's timeout.

#include <torch/library.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>
#include <tuple>

#include "python/csrc/extension.hpp"

#ifdef FUSEDCOLL_TORCH_HAVE_EMU
#include "fusedcoll/emu.hpp"
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
#include "fusedcoll/mpi.hpp"
#endif

namespace fusedcoll::torch_ext {
namespace {

using fusedcoll::detail::make_string;

#ifdef FUSEDCOLL_TORCH_HAVE_EMU

/// One emulated rank: the mailbox between its Python thread and its host thread in the World.
struct RankSlot {
  int rank = 0;
  int size = 0;
  std::mutex mu;
  std::condition_variable cv;
  const std::function<void(Communicator&)>* task = nullptr;
  bool task_done = false;
  std::exception_ptr task_error;
  bool attached = false;
  bool detached = false;
  bool python_failed = false;
  std::string python_error;
  /// The host thread left `per_rank` (the Python side detached).
  bool exited = false;

  /// Runs `body` on this rank's host thread; rethrows its exception here.
  void execute(std::string_view op, const std::function<void(Communicator&)>& body) {
    std::unique_lock lock(mu);
    if (exited)
      throw BackendError(make_string("fusedcoll.", op, ": rank ", rank,
                                     " has left its fusedcoll.run; it can make no more calls"));
    task = &body;
    task_done = false;
    cv.notify_all();
    cv.wait(lock, [&] { return task_done; });
    task_done = false;
    if (task_error) std::rethrow_exception(std::exchange(task_error, nullptr));
  }

  /// The body of `per_rank`: serve posted calls until the Python thread detaches.
  void serve(Communicator& comm) {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return task != nullptr || detached; });
      if (task != nullptr) {
        const auto* body = std::exchange(task, nullptr);
        lock.unlock();
        std::exception_ptr error;
        try {
          (*body)(comm);
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        task_error = error;
        task_done = true;
        cv.notify_all();
        continue;
      }
      exited = true;
      if (python_failed)
        throw BackendError(make_string("the rank's Python function raised ", python_error));
      return;
    }
  }
};

struct EmuRun {
  std::unique_ptr<emu::World> world;
  std::vector<std::unique_ptr<RankSlot>> slots;
  std::thread runner;
  std::exception_ptr error;
};

thread_local RankSlot* t_slot = nullptr;

#endif  // FUSEDCOLL_TORCH_HAVE_EMU

struct Session {
  std::mutex mu;
  /// Serialises calls on the MPI communicator (one collective at a time per process) and
  /// finalize against them.
  std::mutex call_mu;
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  std::optional<Communicator> mpi;
  bool initialised_mpi = false;  // MPI_Init was ours, so MPI_Finalize is too
  bool finalised = false;
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  std::unique_ptr<EmuRun> emu;
#endif
};

/// Never destroyed: a communicator freed by a static destructor after the interpreter's exit
/// would call MPI after MPI_Finalize, or a collective that the other ranks never join.
Session& session() {
  static Session* s = new Session;
  return *s;
}

[[noreturn]] void not_initialised(std::string_view op) {
  C10_THROW_ERROR(Error, tagged("not_initialized",
                                make_string("fusedcoll.", op,
                                            ": fusedcoll is not initialised: call "
                                            "fusedcoll.init() first (or, on the emulator, make "
                                            "the call inside fusedcoll.run)")));
}

#ifdef FUSEDCOLL_TORCH_HAVE_MPI
std::optional<Communicator> mpi_communicator() {
  Session& s = session();
  std::lock_guard lock(s.mu);
  return s.mpi;
}
#endif

}  // namespace

void with_communicator(std::string_view op, const std::function<void(Communicator&)>& body) {
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  if (t_slot != nullptr) {
    t_slot->execute(op, body);
    return;
  }
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  if (auto comm = mpi_communicator()) {
    std::lock_guard call(session().call_mu);
    body(*comm);
    return;
  }
#endif
  not_initialised(op);
}

int current_rank() {
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  if (t_slot != nullptr) return t_slot->rank;
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  if (auto comm = mpi_communicator()) return comm->rank();
#endif
  not_initialised("rank");
}

int current_size() {
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  if (t_slot != nullptr) return t_slot->size;
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  if (auto comm = mpi_communicator()) return comm->size();
#endif
  not_initialised("size");
}

namespace {

std::vector<std::int64_t> init_mpi(std::int64_t workgroups, std::int64_t initial_window_bytes) {
  return translate([&]() -> std::vector<std::int64_t> {
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
    Session& s = session();
    std::lock_guard lock(s.mu);
    if (!s.mpi) {
      FC_ENFORCE(!s.finalised,
                 "MPI was finalised in this process (fusedcoll.finalize); it cannot be "
                 "initialised again");
      FC_ENFORCE(workgroups >= 0 && workgroups <= 4096, "workgroups ", workgroups,
                 " is outside [0, 4096]");
      FC_ENFORCE(initial_window_bytes >= 0, "initial_window_bytes is negative");
      int already = 0;
      MPI_Initialized(&already);
      int argc = 0;
      char* args[] = {nullptr};
      char** argv = args;
      mpi::Options options;
      options.workgroups = static_cast<int>(workgroups);
      options.initial_window_bytes = static_cast<std::size_t>(initial_window_bytes);
      s.mpi = mpi::init(argc, argv, options);
      s.initialised_mpi = !already;
    }
    return {s.mpi->rank(), s.mpi->size()};
#else
    (void)workgroups;
    (void)initial_window_bytes;
    throw UnsupportedError(
        "this build of fusedcoll has no MPI backend (configure with FUSEDCOLL_ENABLE_MPI=ON)");
#endif
  });
}

void finalize() {
  translate([&] {
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
    Session& s = session();
    std::lock_guard call(s.call_mu);
    std::lock_guard lock(s.mu);
    if (!s.mpi) return;
    // The communicator's window is freed collectively here, on every rank, before MPI_Finalize
    // (mpi.hpp); a communicator broken by a timeout leaks its window instead of hanging.
    s.mpi.reset();
    if (s.initialised_mpi) mpi::finalize();
    s.finalised = true;
#endif
  });
}

void abort_job(std::int64_t code) {
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, static_cast<int>(code));
#endif
  (void)code;
}

std::int64_t rank_op() {
  return translate([] { return current_rank(); });
}
std::int64_t size_op() {
  return translate([] { return current_size(); });
}

void barrier_op() {
  translate([] { with_communicator("barrier", [](Communicator& comm) { barrier(comm); }); });
}

std::string backend_op() {
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  if (t_slot != nullptr) return "emu";
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  if (mpi_communicator()) return "mpi";
#endif
  return "none";
}

bool has_backend(c10::string_view name) {
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  if (name == "emu") return true;
#endif
#ifdef FUSEDCOLL_TORCH_HAVE_MPI
  if (name == "mpi") return true;
#endif
  return false;
}

#ifdef FUSEDCOLL_TORCH_HAVE_EMU

void emu_start(std::int64_t world_size, std::int64_t compute_units, std::int64_t max_resident_wgs,
               double timeout_s, std::int64_t fuzz_seed, bool check_protocol, double link_gbps,
               double link_us) {
  translate([&] {
    Session& s = session();
    std::lock_guard lock(s.mu);
    FC_ENFORCE(s.emu == nullptr, "fusedcoll.run: a run is already in progress in this process");
    FC_ENFORCE(world_size >= 1 && world_size <= 64, "emu world_size ", world_size,
               " is outside [1, 64]");
    FC_ENFORCE(compute_units >= 1 && compute_units <= 64, "compute_units ", compute_units,
               " is outside [1, 64]");
    FC_ENFORCE(max_resident_wgs >= 0 && max_resident_wgs <= 4096, "max_resident_wgs ",
               max_resident_wgs, " is outside [0, 4096]");
    FC_ENFORCE(fuzz_seed >= 0, "fuzz_seed is negative");
    emu::WorldOptions o;
    o.world_size = static_cast<int>(world_size);
    o.device.compute_units = static_cast<int>(compute_units);
    o.device.max_resident_wgs = static_cast<int>(max_resident_wgs);
    o.timeout_s = timeout_s;
    o.fuzz_seed = static_cast<std::uint64_t>(fuzz_seed);
    o.check_protocol = check_protocol;
    o.link_gbps = link_gbps;
    o.link_latency_us = link_us;
    auto run = std::make_unique<EmuRun>();
    run->world = std::make_unique<emu::World>(o);
    for (int r = 0; r < o.world_size; ++r) {
      auto slot = std::make_unique<RankSlot>();
      slot->rank = r;
      slot->size = o.world_size;
      run->slots.push_back(std::move(slot));
    }
    EmuRun* raw = run.get();
    raw->runner = std::thread([raw] {
      try {
        raw->world->run([raw](Communicator& comm) { raw->slots[comm.rank()]->serve(comm); });
      } catch (...) {
        raw->error = std::current_exception();
      }
    });
    s.emu = std::move(run);
  });
}

RankSlot& slot_of(std::int64_t rank, std::string_view what) {
  Session& s = session();
  std::lock_guard lock(s.mu);
  FC_ENFORCE(s.emu != nullptr, what, ": no fusedcoll.run is in progress");
  FC_ENFORCE(rank >= 0 && rank < static_cast<std::int64_t>(s.emu->slots.size()), what, ": rank ",
             rank, " is outside the run's world");
  return *s.emu->slots[static_cast<std::size_t>(rank)];
}

void emu_attach(std::int64_t rank) {
  translate([&] {
    RankSlot& slot = slot_of(rank, "_emu_attach");
    std::lock_guard lock(slot.mu);
    FC_ENFORCE(!slot.attached, "_emu_attach: rank ", rank, " is already attached");
    FC_ENFORCE(t_slot == nullptr, "_emu_attach: this thread already stands for a rank");
    slot.attached = true;
    t_slot = &slot;
  });
}

void emu_detach(std::int64_t rank, bool failed, c10::string_view message) {
  translate([&] {
    RankSlot& slot = slot_of(rank, "_emu_detach");
    {
      std::lock_guard lock(slot.mu);
      slot.detached = true;
      slot.python_failed = failed;
      slot.python_error = std::string(message);
    }
    slot.cv.notify_all();
    if (t_slot == &slot) t_slot = nullptr;
  });
}

/// (root rank or -1, ErrorCode, message) of the finished run; the rank parsed from the
/// "rank R: " prefix `World::run` gives its root cause (emu.hpp).
std::tuple<std::int64_t, std::int64_t, std::string> emu_finish() {
  return translate([&] {
    std::unique_ptr<EmuRun> run;
    {
      Session& s = session();
      std::lock_guard lock(s.mu);
      FC_ENFORCE(s.emu != nullptr, "_emu_finish: no fusedcoll.run is in progress");
      run = std::move(s.emu);
    }
    run->runner.join();
    std::tuple<std::int64_t, std::int64_t, std::string> result{-1, 0, ""};
    if (run->error) {
      try {
        std::rethrow_exception(run->error);
      } catch (const Error& e) {
        result = {-1, static_cast<std::int64_t>(e.code()), e.what()};
      } catch (const std::exception& e) {
        result = {-1, static_cast<std::int64_t>(ErrorCode::internal), e.what()};
      }
      static const std::regex kRank("^rank ([0-9]+): ");
      std::smatch m;
      const std::string& what = std::get<2>(result);
      if (std::regex_search(what, m, kRank)) std::get<0>(result) = std::stoll(m[1].str());
    }
    run.reset();  // the World's threads end here
    return result;
  });
}

#endif  // FUSEDCOLL_TORCH_HAVE_EMU

}  // namespace
}  // namespace fusedcoll::torch_ext

TORCH_LIBRARY(fusedcoll, m) {
  using namespace fusedcoll::torch_ext;
  m.def("init_mpi(int workgroups=0, int initial_window_bytes=1048576) -> int[]", &init_mpi);
  m.def("finalize() -> ()", &finalize);
  m.def("abort(int code=1) -> ()", &abort_job);
  m.def("rank() -> int", &rank_op);
  m.def("size() -> int", &size_op);
  m.def("barrier() -> ()", &barrier_op);
  m.def("backend() -> str", &backend_op);
  m.def("has_backend(str name) -> bool", &has_backend);
#ifdef FUSEDCOLL_TORCH_HAVE_EMU
  m.def(
      "_emu_start(int world_size, int compute_units, int max_resident_wgs, float timeout_s, "
      "int fuzz_seed, bool check_protocol, float link_gbps, float link_us) -> ()",
      &emu_start);
  m.def("_emu_attach(int rank) -> ()", &emu_attach);
  m.def("_emu_detach(int rank, bool failed, str message) -> ()", &emu_detach);
  m.def("_emu_finish() -> (int, int, str)", &emu_finish);
#endif
}
