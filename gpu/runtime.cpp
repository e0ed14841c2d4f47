// Host side of the GPU runtime (gpu/runtime.hpp).

#include "gpu/runtime.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "fusedcoll/inputs.hpp"
#if defined(FC_GPU_PROCESS)
#include "gpu/process.hpp"
#endif

namespace fusedcoll::gpu {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  // A few bytes even for empty shapes: kernels may form (never dereference) addresses in them.
  FC_CHECK_GPU(gpuMalloc(&ptr_, std::max<std::size_t>(bytes, 16)));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) (void)gpuFree(ptr_);  // a destructor cannot report; the next call will
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) (void)gpuFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

void poison_device(float* p, std::int64_t n) {
  if (n <= 0) return;
  std::vector<float> poison_host(static_cast<std::size_t>(n));
  poison(poison_host.data(), poison_host.size() * sizeof(float));
  FC_CHECK_GPU(
      gpuMemcpy(p, poison_host.data(), poison_host.size() * sizeof(float), gpuMemcpyHostToDevice));
}

float* Arena::alloc_poisoned(std::int64_t n) {
  float* p = alloc<float>(n);
  poison_device(p, n);
  return p;
}

std::vector<std::int64_t> pack_indices(const ConstTensorView& v) {
  const std::int64_t n = v.rank() == 0 ? 0 : v.size(0);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  const std::int64_t st = v.stride(0);
  if (v.dtype() == DType::i64) {
    const auto* p = static_cast<const std::int64_t*>(v.data());
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = p[i * st];
  } else {
    const auto* p = static_cast<const std::int32_t*>(v.data());
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = p[i * st];
  }
  return out;
}

void download_rows(const float* dev, std::int64_t rows, std::int64_t cols, float* host,
                   std::int64_t ld) {
  if (rows == 0 || cols == 0) return;
  if (ld == cols) {
    FC_CHECK_GPU(gpuMemcpy(host, dev, static_cast<std::size_t>(rows * cols) * sizeof(float),
                           gpuMemcpyDeviceToHost));
    return;
  }
  std::vector<float> tmp(static_cast<std::size_t>(rows * cols));
  FC_CHECK_GPU(gpuMemcpy(tmp.data(), dev, tmp.size() * sizeof(float), gpuMemcpyDeviceToHost));
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(host + r * ld, tmp.data() + r * cols, static_cast<std::size_t>(cols) * sizeof(float));
}

void ProcessDeleter::operator()(Process* p) const noexcept {
#if defined(FC_GPU_PROCESS)
  delete p;
#else
  (void)p;  // never made without process mode
#endif
}

Context::Context(int world_size, int device, double timeout_s, ProcessPtr process)
    : process_(std::move(process)),
      sharing_(world_size),
      P_(world_size),
      device_(device),
      timeout_s_(timeout_s) {
  FC_ENFORCE_GE(world_size, 1, "world_size");
#if defined(FC_GPU_PROCESS)
  if (process_) {
    me_ = process_->rank();
    sharing_ = process_->sharing();
    FC_ENFORCE_EQ(process_->size(), world_size, "process mode's world size");
    FC_ENFORCE_EQ(process_->device(), device, "process mode's device");
  }
#endif
  int count = 0;
  const gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess || count == 0)
    throw UnsupportedError(detail::make_string("fusedcoll gpu: no " FC_GPU_VENDOR " device visible (",
                                               gpuGetErrorString(e), ")"));
  FC_ENFORCE(device >= 0 && device < count, "device ", device, " of ", count);
  FC_CHECK_GPU(gpuSetDevice(device));
  gpuDeviceProp prop{};
  FC_CHECK_GPU(gpuGetDeviceProperties(&prop, device));
  sms_ = prop.multiProcessorCount;
  name_ = prop.name;
  FC_CHECK_GPU(gpuStreamCreate(&stream_));
  FC_CHECK_GPU(gpuEventCreate(&start_));
  FC_CHECK_GPU(gpuEventCreate(&stop_));
  // Process mode: the slots are the process's own, allocated and shared by `process_`.
  if (!process_)
    slots_ = DeviceBuffer(static_cast<std::size_t>(P_) * kSlotsPerRank * sizeof(std::uint64_t));
  record_ = DeviceBuffer(sizeof(TimeoutRecord));
  issued_.assign(static_cast<std::size_t>(P_) * kSlotsPerRank, 0);
  reset_slots();
}

Context::~Context() {
  process_.reset();
  (void)gpuEventDestroy(start_);
  (void)gpuEventDestroy(stop_);
  (void)gpuStreamDestroy(stream_);
}

void Context::reset_slots() {
  if (!process_) FC_CHECK_GPU(gpuMemset(slots_.get(), 0, slots_.bytes()));
  FC_CHECK_GPU(gpuMemset(record_.get(), 0, sizeof(TimeoutRecord)));
  std::fill(issued_.begin(), issued_.end(), 0);
}

SyncView Context::view() const noexcept {
  SyncView v;
  v.slots = slots_.as<std::uint64_t>();
  v.slots_per_rank = kSlotsPerRank;
  v.record = record_.as<TimeoutRecord>();
  v.timeout_ticks = static_cast<std::uint64_t>(timeout_s_ * port::kDeviceClockHz);
#if defined(FC_GPU_PROCESS)
  if (process_) process_->fill(v);
#endif
  return v;
}

int Context::heap_id() const noexcept {
#if defined(FC_GPU_PROCESS)
  if (process_) return process_->heap_id();
#endif
  return -1;
}

void Context::begin_call(const std::string& op) {
  FC_CHECK_GPU(gpuSetDevice(device_));  // host threads of `World::run` start on device 0
#if defined(FC_GPU_PROCESS)
  if (process_) process_->begin_call(op);
#endif
  op_ = op;
  names_.clear();
  next_slot_ = 0;
}

int Context::slots(const std::string& name, std::int64_t count) {
  if (next_slot_ + count > kernel_base_)
    throw UnsupportedError(
        detail::make_string("fusedcoll gpu: ", op_, " needs more than ", kernel_base_,
                            " signal slots per rank ('", name, "' asks for ", count, "; ",
                            kSlotsPerRank - kernel_base_, " are held by users' kernels' signals)"));
  const int base = next_slot_;
  next_slot_ += static_cast<int>(count);
  names_.push_back({base, static_cast<int>(count), name});
  return base;
}

int Context::kernel_slots(const std::string& name, int count) {
  for (const SlotName& n : kernel_names_)
    if (n.name == name && count <= n.count) return n.base;
  if (count > kernel_base_ - next_slot_)
    throw UnsupportedError(detail::make_string(
        "fusedcoll gpu: signals '", name, "': ", count, " more signal slots do not fit (",
        kernel_base_, " slots per rank are left to users' kernels and the operators)"));
  kernel_base_ -= count;
  kernel_names_.push_back({kernel_base_, count, name});
  return kernel_base_;
}

std::uint64_t Context::expect(int rank, int slot, std::uint64_t count) {
  std::uint64_t& v = issued_[static_cast<std::size_t>(rank) * kSlotsPerRank + slot];
  v += count;
  return v;
}

std::uint64_t Context::issued(int rank, int slot) const {
  return issued_[static_cast<std::size_t>(rank) * kSlotsPerRank + slot];
}

int Context::fit_blocks(int per_sm, std::int64_t work) const {
  // Single mode: all P ranks' blocks in one launch. Process mode: this rank's launch beside those
  // of the ranks sharing its device (they run at once only where the device runs several
  // processes' kernels together, e.g. under CUDA MPS; otherwise they take turns).
  const int ranks = process_ ? sharing_ : P_;
  const std::int64_t resident = static_cast<std::int64_t>(per_sm) * sms_;
  if (resident < ranks)
    throw UnsupportedError(
        detail::make_string("fusedcoll gpu: ", op_, ": only ", resident, " blocks of ", kThreads,
                            " threads can be resident on ", name_, ", fewer than the ", ranks,
                            " ranks that must all run at once"));
  return static_cast<int>(std::clamp<std::int64_t>(work, 1, resident / ranks));
}

void Context::start_timing() {
  FC_CHECK_GPU(gpuEventRecord(start_, stream_));
  timing_ = true;
}

void Context::stop_timing() { FC_CHECK_GPU(gpuEventRecord(stop_, stream_)); }

void Context::finish(const std::string& op) {
  FC_CHECK_GPU(gpuGetLastError());
  FC_CHECK_GPU(gpuStreamSynchronize(stream_));
  if (timing_) {
    float ms = 0;
    FC_CHECK_GPU(gpuEventElapsedTime(&ms, start_, stop_));
    last_ms_ = ms;
    timing_ = false;
  }
  TimeoutRecord rec{};
  FC_CHECK_GPU(gpuMemcpy(&rec, record_.get(), sizeof rec, gpuMemcpyDeviceToHost));
#if defined(FC_GPU_PROCESS)
  if (process_ && rec.flag == 0) {
    try {
      process_->quiesce();  // every put and signal the kernels posted has left
    } catch (...) {
      process_->mark_failed();
      throw;
    }
  }
#endif
  if (rec.flag == 0) return;
  std::string slot_name = "unnamed";
  for (const std::vector<SlotName>* list : {&names_, &kernel_names_})
    for (const SlotName& n : *list)
      if (rec.slot >= n.base && rec.slot < n.base + n.count)
        slot_name = detail::make_string("'", n.name, "'[", rec.slot - n.base, "]");
  reset_slots();
  std::ostringstream os;
  if (rec.slot == kQueueFullSlot) {
    os << "fusedcoll gpu: timeout in " << op << ": rank " << rec.rank << " block " << rec.block
       << " found the proxy's queue full for more than " << timeout_s_
       << " s (FUSEDCOLL_TIMEOUT): the proxy thread is stuck";
  } else {
    os << "fusedcoll gpu: timeout in " << op << ": rank " << rec.rank << " block " << rec.block
       << " waited more than " << timeout_s_ << " s (FUSEDCOLL_TIMEOUT) for slot " << rec.slot
       << " (" << slot_name << ") " << to_string(static_cast<Cmp>(rec.cmp)) << " " << rec.expected
       << ", observed " << rec.observed
       << (process_ ? "" : " (all slots were reset; a missing signal or a block that never ran)");
  }
#if defined(FC_GPU_PROCESS)
  if (process_) {
    // Peers may still be mid-call: this rank's World refuses further calls.
    process_->mark_failed();
    os << "; " << process_->describe(rec.slot);
  }
#endif
  throw TimeoutError(os.str());
}

}  // namespace fusedcoll::gpu
