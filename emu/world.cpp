// World::run (SPMD host threads, failure propagation) and the emulator's Backend.

#include <exception>
#include <mutex>
#include <string_view>
#include <thread>

#include "emu/ops.hpp"
#include "emu/state.hpp"

namespace fusedcoll::emu {
namespace {

class EmuBackend final : public Backend {
 public:
  explicit EmuBackend(Rank& rk) : rk_(rk) {}
  int rank() const noexcept override { return rk_.rank(); }
  int size() const noexcept override { return rk_.size(); }
  void barrier() override { rk_.barrier("user barrier"); }
  void embedding_alltoall(const EmbeddingAllToAllArgs& a, Mode m) override {
    ops::embedding_alltoall(rk_, a, m);
  }
  void gemv_allreduce(const GemvAllReduceArgs& a, Mode m) override { ops::gemv_allreduce(rk_, a, m); }
  void gemm_alltoall(const GemmAllToAllArgs& a, Mode m) override { ops::gemm_alltoall(rk_, a, m); }
  void all_reduce(const AllReduceArgs& a) override { ops::all_reduce(rk_, a); }
  void all_to_allv(const AllToAllvArgs& a) override { ops::all_to_allv(rk_, a); }
  void reduce_scatter(const ReduceScatterArgs& a) override { ops::reduce_scatter(rk_, a); }
  void all_gather(const AllGatherArgs& a) override { ops::all_gather(rk_, a); }
  void broadcast(const BroadcastArgs& a) override { ops::broadcast(rk_, a); }

 private:
  Rank& rk_;
};

/// True for the error every other rank gets once the world aborted; false for a root cause
/// (including a workgroup's own exception, which its launching host thread rethrows).
bool is_abort_consequence(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const BackendError& err) {
    return std::string_view(err.what()).starts_with(World::State::kAbortPrefix);
  } catch (...) {
    return false;
  }
}

}  // namespace

void World::run(const std::function<void(Communicator&)>& per_rank) {
  State& s = *state_;
  FC_ENFORCE(!s.broken, "this World was aborted by an earlier failure; create a new World");
  if (s.backends.empty())
    for (auto& r : s.ranks) s.backends.push_back(std::make_shared<EmuBackend>(*r));

  struct Failure {
    int rank;
    std::exception_ptr error;
    bool consequence;  // thrown after the world had already aborted
  };
  std::mutex mu;
  std::vector<Failure> failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < s.size; ++r) {
    threads.emplace_back([&, r] {
      Communicator comm(s.backends[r]);
      try {
        s.ranks[r]->set_activity("running user code");
        per_rank(comm);
        s.ranks[r]->set_activity("returned from user code");
      } catch (...) {
        const bool consequence = is_abort_consequence(std::current_exception());
        {
          std::lock_guard lock(mu);
          failures.push_back({r, std::current_exception(), consequence});
        }
        s.ranks[r]->set_activity("failed");
        s.abort_from(std::current_exception(), "rank " + std::to_string(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures.empty()) return;
  s.broken = true;
  // The root cause: the first error that is not the abort's echo on another rank.
  const Failure* root = &failures.front();
  for (const auto& f : failures)
    if (!f.consequence) {
      root = &f;
      break;
    }
  std::rethrow_exception(impl::clone_error(root->error, "rank " + std::to_string(root->rank) + ": "));
}

}  // namespace fusedcoll::emu
