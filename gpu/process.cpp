// Process mode's device state (gpu/process.hpp).

#include "gpu/process.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace fusedcoll::gpu {
namespace {

process::IpcHandle handle_of(void* p) {
  gpuIpcMemHandle_t h{};
  FC_CHECK_GPU(gpuIpcGetMemHandle(&h, p));
  process::IpcHandle out{};
  static_assert(sizeof h <= sizeof out, "an IPC handle fits its bytes");
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

void* open_handle(const process::IpcHandle& bytes) {
  gpuIpcMemHandle_t h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  void* p = nullptr;
  FC_CHECK_GPU(gpuIpcOpenMemHandle(&p, h, gpuIpcMemLazyEnablePeerAccess));
  return p;
}

template <class T>
T* pinned(std::size_t n) {
  void* p = nullptr;
  FC_CHECK_GPU(gpuHostAlloc(&p, n * sizeof(T), gpuHostAllocMapped));
  std::memset(p, 0, n * sizeof(T));
  return static_cast<T*>(p);
}

template <class T>
T* device_view(T* host) {
  void* d = nullptr;
  FC_CHECK_GPU(gpuHostGetDevicePointer(&d, host, 0));
  return static_cast<T*>(d);
}

}  // namespace

/// The proxy's hands on this process's device: its own stream (never the legacy default stream,
/// which would wait for the running persistent kernel), synchronous copies, and signals as adds
/// into the pinned `inbound` counters the waits read, made only after the copies before them.
class Process::Memory final : public proxy::DeviceMemory {
 public:
  Memory(Process& owner) : owner_(owner) {
    FC_CHECK_GPU(gpuSetDevice(owner.device_));
    FC_CHECK_GPU(gpuStreamCreate(&stream_));
  }
  ~Memory() override { (void)gpuStreamDestroy(stream_); }
  void read(std::uint64_t src, void* dst, std::size_t bytes) override {
    FC_CHECK_GPU(gpuSetDevice(owner_.device_));
    FC_CHECK_GPU(gpuMemcpyAsync(dst, reinterpret_cast<const void*>(src), bytes,
                                gpuMemcpyDeviceToHost, stream_));
    FC_CHECK_GPU(gpuStreamSynchronize(stream_));
  }
  void write(int buffer, std::uint64_t offset, const void* src, std::size_t bytes) override {
    const std::lock_guard<std::mutex> lock(owner_.heap_mu_);
    // The heap, or one of allocate()'s buffers.
    unsigned char* base = buffer == owner_.heap_id_ ? owner_.heap_ : nullptr;
    std::size_t size = buffer == owner_.heap_id_ ? owner_.heap_bytes_ : 0;
    for (const Allocation& a : owner_.allocations_)
      if (a.id == buffer) {
        base = a.own.as<unsigned char>();
        size = a.own.bytes();
      }
    FC_CHECK_INTERNAL(base != nullptr && offset + bytes <= size, "fusedcoll gpu: rank ",
                      owner_.rank_, ": a proxied put into buffer ", buffer, " at ", offset, " + ",
                      bytes, " (the heap is ", owner_.heap_id_, ", ", owner_.heap_bytes_,
                      " bytes; ", owner_.allocations_.size(), " other allocations)");
    FC_CHECK_GPU(gpuSetDevice(owner_.device_));
    FC_CHECK_GPU(gpuMemcpyAsync(base + offset, src, bytes, gpuMemcpyHostToDevice, stream_));
    FC_CHECK_GPU(gpuStreamSynchronize(stream_));
  }
  void signal(int slot, std::uint64_t value, proxy::SignalOp op) override {
    FC_CHECK_INTERNAL(slot >= 0 && slot < Context::kSlotsPerRank,
                      "fusedcoll gpu: proxied signal slot ", slot);
    // The copies before it were synchronised: their bytes are in device memory already. A wait
    // reads the device slot plus this counter, so a set is exact on a slot nothing adds to.
    std::atomic_ref<std::uint64_t> v(owner_.inbound_[slot]);
    if (op == proxy::SignalOp::set) v.store(value, std::memory_order_release);
    else v.fetch_add(value, std::memory_order_release);
  }

 private:
  Process& owner_;
  gpuStream_t stream_{};
};

Process::Process(const ProcessSetup& setup) : timeout_s_(setup.timeout_s) {
  process::check_mpi(MPI_Comm_dup(setup.comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  const std::vector<int> nodes = process::node_of(comm_);
  routes_ = process::routes(nodes, rank_, setup.proxy);
  int visible = 0;
  if (gpuGetDeviceCount(&visible) != gpuSuccess) visible = 0;
  device_ = process::pick_device(setup.device, process::local_rank(nodes, rank_), visible);
  FC_CHECK_GPU(gpuSetDevice(device_));
  // Ranks on this node with the same device share its multiprocessors.
  const std::vector<std::string> devs = process::allgather_bytes(
      comm_, std::to_string(nodes[static_cast<std::size_t>(rank_)]) + ":" + std::to_string(device_),
      timeout_s_, "to report its device");
  sharing_ =
      static_cast<int>(std::count(devs.begin(), devs.end(), devs[static_cast<std::size_t>(rank_)]));
  handles_ = std::make_unique<process::HandleExchange>(comm_, timeout_s_);

  // Signal slots: zeroed before any peer can map them (the exchange is the barrier).
  slots_ = DeviceBuffer(static_cast<std::size_t>(Context::kSlotsPerRank) * sizeof(std::uint64_t));
  FC_CHECK_GPU(gpuMemset(slots_.get(), 0, slots_.bytes()));
  const auto hs = handles_->exchange("signal slots", slots_.bytes(), handle_of(slots_.get()));
  peer_slots_.assign(static_cast<std::size_t>(size_), nullptr);
  for (int q = 0; q < size_; ++q) {
    const process::Route r = routes_[static_cast<std::size_t>(q)];
    if (r == process::Route::self)
      peer_slots_[static_cast<std::size_t>(q)] = slots_.as<std::uint64_t>();
    if (r != process::Route::ipc) continue;
    void* p = open_handle(hs[static_cast<std::size_t>(q)]);
    slot_maps_.push_back({q, p});
    peer_slots_[static_cast<std::size_t>(q)] = static_cast<std::uint64_t*>(p);
  }
  dev_peer_slots_ = DeviceBuffer(peer_slots_.size() * sizeof(std::uint64_t*));
  FC_CHECK_GPU(gpuMemcpy(dev_peer_slots_.get(), peer_slots_.data(), dev_peer_slots_.bytes(),
                         gpuMemcpyHostToDevice));
  std::vector<std::uint8_t> routes(static_cast<std::size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    const process::Route r = routes_[static_cast<std::size_t>(q)];
    routes[static_cast<std::size_t>(q)] = r == process::Route::self  ? kRouteSelf
                                          : r == process::Route::ipc ? kRouteIpc
                                                                     : kRouteProxy;
  }
  dev_routes_ = DeviceBuffer(routes.size());
  FC_CHECK_GPU(gpuMemcpy(dev_routes_.get(), routes.data(), routes.size(), gpuMemcpyHostToDevice));

  // The proxy: always started (a rank with no proxied peer never posts, and its thread idles).
  inbound_ = pinned<std::uint64_t>(Context::kSlotsPerRank);
  ring_ = pinned<proxy::Record>(capacity_);
  tail_ = pinned<std::uint64_t>(1);
  head_ = DeviceBuffer(sizeof(std::uint64_t));
  FC_CHECK_GPU(gpuMemset(head_.get(), 0, sizeof(std::uint64_t)));
  memory_ = std::make_unique<Memory>(*this);
  proxy::QueueView host_view;
  host_view.ring = ring_;
  host_view.capacity = capacity_;
  host_view.tail = tail_;
  proxy::Options po;
  po.timeout_s = timeout_s_;
  proxy_ = std::make_unique<proxy::Proxy>(comm_, host_view, tail_, *memory_, po);
}

Process::~Process() {
  // Every rank has finished its last call before any proxy stops receiving or frees its
  // communicator. Bounded by the timeout: a peer that is gone leaves this rank's request pending
  // (its job is broken anyway) instead of hanging it.
  try {
    exchange("", "to end process mode");
  } catch (...) {
  }
  proxy_.reset();  // the thread stops before the memory it lands into goes
  memory_.reset();
  release_heap();
  for (const Allocation& a : allocations_)
    for (const Mapping& m : a.maps) (void)gpuIpcCloseMemHandle(m.ptr);
  allocations_.clear();
  for (const Mapping& m : slot_maps_) (void)gpuIpcCloseMemHandle(m.ptr);
  if (ring_ != nullptr) (void)gpuFreeHost(ring_);
  if (tail_ != nullptr) (void)gpuFreeHost(tail_);
  if (inbound_ != nullptr) (void)gpuFreeHost(inbound_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Process::release_heap() noexcept {
  for (const Mapping& m : heap_maps_) (void)gpuIpcCloseMemHandle(m.ptr);
  heap_maps_.clear();
  shadows_.clear();
  heap_buf_ = DeviceBuffer();
  heap_ = nullptr;
  heap_bytes_ = 0;
}

void Process::fill(SyncView& v) const {
  v.slots = slots_.as<std::uint64_t>();
  v.peer_slots = dev_peer_slots_.as<std::uint64_t*>();
  v.route = dev_routes_.as<std::uint8_t>();
  v.inbound = device_view(inbound_);
  v.queue.ring = device_view(ring_);
  v.queue.capacity = capacity_;
  v.queue.head = head_.as<std::uint64_t>();
  v.queue.tail = device_view(tail_);
  v.queue.timeout_ticks = v.timeout_ticks;
  v.system = 1;
}

std::vector<std::string> Process::exchange(const std::string& blob, const std::string& what) {
  return process::allgather_bytes(comm_, blob, timeout_s_, what);
}

void Process::reserve(std::size_t bytes) {
  if (bytes <= heap_bytes_ && heap_ != nullptr) return;
  // Twice what is asked, so that growing calls do not remap every time; every rank computes the
  // same size from the same agreed value, and the exchange checks that they did.
  const std::size_t want = std::max<std::size_t>(bytes * 2, std::size_t{1} << 20);
  const std::lock_guard<std::mutex> lock(heap_mu_);
  release_heap();
  heap_buf_ = DeviceBuffer(want);
  heap_ = heap_buf_.as<unsigned char>();
  heap_bytes_ = want;
  const auto hs = handles_->exchange("heap", want, handle_of(heap_));
  heap_id_ = handles_->count() - 1;
  peer_heap_.assign(static_cast<std::size_t>(size_), nullptr);
  for (int q = 0; q < size_; ++q) {
    unsigned char*& at = peer_heap_[static_cast<std::size_t>(q)];
    switch (routes_[static_cast<std::size_t>(q)]) {
      case process::Route::self:
        at = heap_;
        break;
      case process::Route::ipc: {
        void* p = open_handle(hs[static_cast<std::size_t>(q)]);
        heap_maps_.push_back({q, p});
        at = static_cast<unsigned char*>(p);
        break;
      }
      case process::Route::proxy:
        at = shadows_.emplace_back(want).as<unsigned char>();
        break;
    }
  }
}

int Process::allocate(const std::string& name, std::size_t bytes) {
  Allocation a;
  a.own = DeviceBuffer(bytes);
  // Zeroed before any peer can map it: the exchange below is the barrier.
  FC_CHECK_GPU(gpuMemset(a.own.get(), 0, std::max<std::size_t>(bytes, 1)));
  FC_CHECK_GPU(gpuDeviceSynchronize());
  const auto hs = handles_->exchange(name, bytes, handle_of(a.own.get()));
  a.id = handles_->count() - 1;
  a.peer.assign(static_cast<std::size_t>(size_), nullptr);
  for (int q = 0; q < size_; ++q) {
    unsigned char*& at = a.peer[static_cast<std::size_t>(q)];
    switch (routes_[static_cast<std::size_t>(q)]) {
      case process::Route::self:
        at = a.own.as<unsigned char>();
        break;
      case process::Route::ipc: {
        void* p = open_handle(hs[static_cast<std::size_t>(q)]);
        a.maps.push_back({q, p});
        at = static_cast<unsigned char*>(p);
        break;
      }
      case process::Route::proxy:
        at = a.shadows.emplace_back(bytes).as<unsigned char>();
        break;
    }
  }
  const int id = a.id;
  const std::lock_guard<std::mutex> lock(heap_mu_);
  allocations_.push_back(std::move(a));
  return id;
}

unsigned char* Process::peer_allocation(int id, int peer) const {
  for (const Allocation& a : allocations_)
    if (a.id == id) return a.peer[static_cast<std::size_t>(peer)];
  throw InternalError(detail::make_string("fusedcoll gpu: no symmetric allocation ", id));
}

unsigned char* Process::peer_heap(int peer) const {
  return peer_heap_[static_cast<std::size_t>(peer)];
}

void Process::begin_call(const std::string& op) {
  if (failed_)
    throw UnsupportedError(
        detail::make_string("fusedcoll gpu: rank ", rank_, ": ", op,
                            " refused: an earlier call failed on this rank in "
                            "process mode, and its peers' state is unknown (make a new World)"));
  op_ = op;
  FC_CHECK_GPU(gpuSetDevice(device_));
}

void Process::quiesce() {
  std::uint64_t posted = 0;
  FC_CHECK_GPU(gpuMemcpy(&posted, head_.get(), sizeof posted, gpuMemcpyDeviceToHost));
  proxy_->quiesce(posted);
}

std::string Process::describe(int slot) const { return proxy_->describe(slot); }

}  // namespace fusedcoll::gpu
