// The MPI Backend behind a Communicator, and the launcher helpers of fusedcoll/mpi.hpp.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

#include "fusedcoll/mpi.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {
namespace {

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, const Options& options) : rt_(comm, options) {}
  int rank() const noexcept override { return rt_.rank(); }
  int size() const noexcept override { return rt_.size(); }
  void barrier() override {
    guarded([&] {
      rt_.begin_call();
      rt_.trace_call("barrier");
      rt_.set_activity("in barrier");
      MPI_Request req = MPI_REQUEST_NULL;
      FC_CHECK_MPI(MPI_Ibarrier(rt_.comm(), &req));
      std::vector<MPI_Request> reqs{req};
      rt_.wait_requests(reqs, "every rank to enter the barrier");
    });
  }
  void embedding_alltoall(const EmbeddingAllToAllArgs& a, Mode m) override {
    guarded([&] { mpi::embedding_alltoall(rt_, a, m); });
  }
  void gemv_allreduce(const GemvAllReduceArgs& a, Mode m) override {
    guarded([&] { mpi::gemv_allreduce(rt_, a, m); });
  }
  void gemm_alltoall(const GemmAllToAllArgs& a, Mode m) override {
    guarded([&] { mpi::gemm_alltoall(rt_, a, m); });
  }
  void all_reduce(const AllReduceArgs& a) override {
    guarded([&] { mpi::all_reduce(rt_, a); });
  }
  void all_to_allv(const AllToAllvArgs& a) override {
    guarded([&] { mpi::all_to_allv(rt_, a); });
  }
  void reduce_scatter(const ReduceScatterArgs& a) override {
    guarded([&] { mpi::reduce_scatter(rt_, a); });
  }
  void all_gather(const AllGatherArgs& a) override {
    guarded([&] { mpi::all_gather(rt_, a); });
  }
  void broadcast(const BroadcastArgs& a) override {
    guarded([&] { mpi::broadcast(rt_, a); });
  }

 private:
  // An error every rank raised in the agreement step (a bad or mismatched call) leaves the
  // communicator usable: nothing moved. Any other error (a timeout, an MPI failure, anything
  // after agreement) may leave peers mid-call, so the runtime refuses further calls.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
      rt_.end_call();
      rt_.set_activity("idle");
    } catch (const TimeoutError&) {
      rt_.mark_failed();
      throw;
    } catch (const BackendError&) {
      rt_.mark_failed();
      throw;
    } catch (...) {
      if (!rt_.in_agreement()) rt_.mark_failed();
      rt_.set_agreement(false);
      throw;
    }
  }

  Runtime rt_;

  friend class mpi::SymmetricBuffer;
};

[[noreturn]] void abort_job(int rank, const char* what) {
  std::fprintf(stderr, "fusedcoll mpi: rank %d: %s\n", rank, what);
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace

SymmetricBuffer::SymmetricBuffer(Communicator& comm, std::size_t bytes) : comm_(comm), bytes_(bytes) {
  auto* backend = dynamic_cast<MpiBackend*>(&comm.backend());
  FC_ENFORCE(backend != nullptr,
             "a SymmetricBuffer needs a communicator of the MPI backend (fusedcoll::mpi)");
  Runtime& rt = backend->rt_;
  rt.begin_call();
  rt.set_activity("in SymmetricBuffer (allocating)");
  id_ = rt.add_buffer(bytes, &data_);
  if (bytes > 0) std::memset(data_, 0, bytes);
  rt.set_activity("idle");
}

SymmetricBuffer::~SymmetricBuffer() {
  // A failed runtime leaks the window rather than start a collective free its peers never join.
  static_cast<MpiBackend&>(comm_.backend()).rt_.remove_buffer(id_);
}

Communicator make_communicator(MPI_Comm comm, const Options& options) {
  return Communicator(std::make_shared<MpiBackend>(comm, options));
}

Communicator init(int& argc, char**& argv, const Options& options) {
  int initialized = 0;
  FC_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    FC_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  }
  return make_communicator(MPI_COMM_WORLD, options);
}

void finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

int run(int& argc, char**& argv, const std::function<void(Communicator&)>& body,
        const Options& options) {
  int rank = -1;
  // Declared outside the try block: the handler must run before the communicator's destructor,
  // which would otherwise start a collective window free that the failed peers never join.
  std::optional<Communicator> comm;
  try {
    comm.emplace(init(argc, argv, options));
    rank = comm->rank();
    body(*comm);
  } catch (const std::exception& e) {
    abort_job(rank, e.what());
  } catch (...) {
    abort_job(rank, "unknown exception");
  }
  comm.reset();
  finalize();
  return 0;
}

}  // namespace fusedcoll::mpi
