// The rma transport (mpi/transport.hpp; docs/mpi.md, "Transports"): one-sided MPI_Put and
// MPI_Accumulate into MPI_Win_allocate windows, one for the slots and data area and one per
// symmetric buffer, each locked for the window's lifetime (MPI_Win_lock_all, passive target).
// Needs shared memory or an RDMA network between every pair of ranks: Debian's Open MPI has no
// one-sided path over TCP that does not hang without target-side progress. Puts need no help
// from the target, so within a host a kernel keeps its compute locality and lets its data leave
// as it is produced.

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "fusedcoll/detail/schedule.hpp"
#include "mpi/runtime.hpp"

namespace fusedcoll::mpi {
namespace {

class Rma final : public Transport {
 public:
  explicit Rma(Runtime& rt) : Transport(rt) {}

  Area allocate(std::size_t data_bytes) override {
    release();
    MPI_Info info = MPI_INFO_NULL;
    FC_CHECK_MPI(MPI_Info_create(&info));
    // Slots only ever see MPI_SUM and MPI_NO_OP: lets the osc component use native atomics.
    FC_CHECK_MPI(MPI_Info_set(info, "accumulate_ops", "same_op_no_op"));
    const std::size_t bytes = kSlotBytes + data_bytes;
    const int rc =
        MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, info, rt_.comm(), &base_, &win_);
    MPI_Info_free(&info);
    // On Debian's Open MPI this is where a missing one-sided transport shows (e.g. ranks on
    // several hosts with only TCP: osc/rdma needs an RDMA-capable BTL, docs/mpi.md).
    check_mpi(rc, "MPI_Win_allocate (symmetric window)", __FILE__, __LINE__);
    FC_CHECK_MPI(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN));
    std::memset(base_, 0, kSlotBytes);
    FC_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
    // No rank may signal into a window whose slots its owner has not zeroed yet.
    FC_CHECK_MPI(MPI_Barrier(rt_.comm()));
    return {base_, true};
  }

  void release() noexcept override {
    if (win_ == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
    base_ = nullptr;
  }

  // The windows stay unfreed: freeing is collective, and the peers may never join.
  void abandon() noexcept override {}

  char* add_buffer(int id, std::size_t bytes) override {
    char* base = nullptr;
    MPI_Win win = MPI_WIN_NULL;
    const int rc =
        MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, rt_.comm(), &base, &win);
    check_mpi(rc, "MPI_Win_allocate (symmetric buffer)", __FILE__, __LINE__);
    FC_CHECK_MPI(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    FC_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
    windows_[id] = win;
    return base;
  }

  void remove_buffer(int id, bool clean) noexcept override {
    const auto it = windows_.find(id);
    if (it == windows_.end()) return;
    if (clean && it->second != MPI_WIN_NULL) {
      MPI_Win_unlock_all(it->second);
      MPI_Win_free(&it->second);
    }
    windows_.erase(it);
  }

  void put(int buffer, int peer, std::size_t offset, const void* src, std::size_t bytes) override {
    if (buffer == Transport::kDataArea)
      return put_bytes(win_, peer, static_cast<MPI_Aint>(kSlotBytes + offset), src, bytes);
    put_bytes(windows_.at(buffer), peer, static_cast<MPI_Aint>(offset), src, bytes);
  }

  void flush_buffer(int buffer, int peer) override {
    FC_CHECK_MPI(MPI_Win_flush(peer, windows_.at(buffer)));
  }

  // The flush whatever the sources: MPI orders no put before a later accumulate.
  void signal(int peer, int slot, std::uint64_t add, Sources) override {
    FC_CHECK_MPI(MPI_Win_flush(peer, win_));
    FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer, slot_disp(slot), 1, MPI_UINT64_T,
                                MPI_SUM, win_));
    FC_CHECK_MPI(MPI_Win_flush(peer, win_));
  }

  void signal_all(const std::vector<int>& peers, int slot, std::uint64_t add, Sources) override {
    FC_CHECK_MPI(MPI_Win_flush_all(win_));
    for (int peer : peers)
      FC_CHECK_MPI(MPI_Accumulate(&add, 1, MPI_UINT64_T, peer, slot_disp(slot), 1, MPI_UINT64_T,
                                  MPI_SUM, win_));
    FC_CHECK_MPI(MPI_Win_flush_all(win_));
  }

  std::uint64_t read_slot(int slot) override {
    std::uint64_t value = 0;
    // Read through MPI's atomics, not a plain load: the slot is updated by MPI_Accumulate, and
    // only accumulate-class reads are atomic with it; the call also drives progress.
    FC_CHECK_MPI(MPI_Fetch_and_op(nullptr, &value, MPI_UINT64_T, rt_.rank(), slot_disp(slot),
                                  MPI_NO_OP, win_));
    FC_CHECK_MPI(MPI_Win_flush(rt_.rank(), win_));
    return value;
  }

  // Puts are complete at the target once flushed: nothing is held back.
  void before_wait() override {}

  void after_wait() override {
    // Unified memory model: make the peers' completed puts visible to this thread's loads.
    FC_CHECK_MPI(MPI_Win_sync(win_));
    for (const auto& [id, win] : windows_) FC_CHECK_MPI(MPI_Win_sync(win));
  }

  // Passive target: puts and accumulates progress without the target's help.
  void poll() override {}
  void end_call() override {}
  std::string unfinished() override { return {}; }

  std::vector<int> destinations(int rank) const override {
    return detail::remote_first(rank, rt_.size());
  }
  // Puts are cheap within a host: locality wins, and data leaves as it is produced anyway.
  bool destination_by_destination() const override { return false; }
  bool lands_anywhere() const override { return false; }
  std::size_t piece_bytes(int, std::int64_t, std::int64_t) const override { return 0; }

 private:
  static constexpr std::size_t kSlotBytes = Runtime::kSlots * sizeof(std::uint64_t);

  static MPI_Aint slot_disp(int slot) {
    return static_cast<MPI_Aint>(slot) * static_cast<MPI_Aint>(sizeof(std::uint64_t));
  }

  static void put_bytes(MPI_Win win, int peer, MPI_Aint disp, const void* src, std::size_t bytes) {
    const auto* p = static_cast<const char*>(src);
    // MPI counts are int: move very large regions in pieces.
    constexpr std::size_t kPiece = std::size_t{1} << 30;
    while (bytes > 0) {
      const std::size_t n = std::min(bytes, kPiece);
      FC_CHECK_MPI(MPI_Put(p, static_cast<int>(n), MPI_BYTE, peer, disp, static_cast<int>(n),
                           MPI_BYTE, win));
      p += n;
      disp += static_cast<MPI_Aint>(n);
      bytes -= n;
    }
  }

  MPI_Win win_ = MPI_WIN_NULL;  // slots, then the data area
  char* base_ = nullptr;
  std::map<int, MPI_Win> windows_;  // symmetric buffers'; in id order, as after_wait syncs them
};

}  // namespace

std::unique_ptr<Transport> make_rma(Runtime& rt) { return std::make_unique<Rma>(rt); }

}  // namespace fusedcoll::mpi
