// Host side of the GPU runtime (gpu/runtime.hpp).

#include "gpu/runtime.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "fusedcoll/inputs.hpp"

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

float* Arena::alloc_poisoned(std::int64_t n) {
  float* p = alloc<float>(n);
  if (n > 0) {
    std::vector<float> poison_host(static_cast<std::size_t>(n));
    poison(poison_host.data(), poison_host.size() * sizeof(float));
    FC_CHECK_GPU(gpuMemcpy(p, poison_host.data(), poison_host.size() * sizeof(float),
                           gpuMemcpyHostToDevice));
  }
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

Context::Context(int world_size, int device, double timeout_s)
    : P_(world_size), device_(device), timeout_s_(timeout_s) {
  FC_ENFORCE_GE(world_size, 1, "world_size");
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
  slots_ = DeviceBuffer(static_cast<std::size_t>(P_) * kSlotsPerRank * sizeof(std::uint64_t));
  record_ = DeviceBuffer(sizeof(TimeoutRecord));
  issued_.assign(static_cast<std::size_t>(P_) * kSlotsPerRank, 0);
  reset_slots();
}

Context::~Context() {
  (void)gpuEventDestroy(start_);
  (void)gpuEventDestroy(stop_);
  (void)gpuStreamDestroy(stream_);
}

void Context::reset_slots() {
  FC_CHECK_GPU(gpuMemset(slots_.get(), 0, slots_.bytes()));
  FC_CHECK_GPU(gpuMemset(record_.get(), 0, sizeof(TimeoutRecord)));
  std::fill(issued_.begin(), issued_.end(), 0);
}

SyncView Context::view() const noexcept {
  SyncView v;
  v.slots = slots_.as<std::uint64_t>();
  v.slots_per_rank = kSlotsPerRank;
  v.record = record_.as<TimeoutRecord>();
  v.timeout_ticks = static_cast<std::uint64_t>(timeout_s_ * port::kDeviceClockHz);
  return v;
}

void Context::begin_call(const std::string& op) {
  FC_CHECK_GPU(gpuSetDevice(device_));  // host threads of `World::run` start on device 0
  op_ = op;
  names_.clear();
  next_slot_ = 0;
}

int Context::slots(const std::string& name, std::int64_t count) {
  if (next_slot_ + count > kSlotsPerRank)
    throw UnsupportedError(detail::make_string("fusedcoll gpu: ", op_, " needs more than ",
                                               kSlotsPerRank, " signal slots per rank ('", name,
                                               "' asks for ", count, ")"));
  const int base = next_slot_;
  next_slot_ += static_cast<int>(count);
  names_.push_back({base, static_cast<int>(count), name});
  return base;
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
  const std::int64_t resident = static_cast<std::int64_t>(per_sm) * sms_;
  if (resident < P_)
    throw UnsupportedError(detail::make_string(
        "fusedcoll gpu: ", op_, ": only ", resident, " blocks of ", kThreads,
        " threads can be resident on ", name_, ", fewer than the ", P_,
        " virtual ranks that must all run at once"));
  return static_cast<int>(std::clamp<std::int64_t>(work, 1, resident / P_));
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
  if (rec.flag == 0) return;
  std::string slot_name = "unnamed";
  for (const SlotName& n : names_)
    if (rec.slot >= n.base && rec.slot < n.base + n.count)
      slot_name = detail::make_string("'", n.name, "'[", rec.slot - n.base, "]");
  reset_slots();
  std::ostringstream os;
  os << "fusedcoll gpu: timeout in " << op << ": rank " << rec.rank << " block " << rec.block
     << " waited more than " << timeout_s_ << " s (FUSEDCOLL_TIMEOUT) for slot " << rec.slot
     << " (" << slot_name << ") >= " << rec.expected << ", observed " << rec.observed
     << " (all slots were reset; a missing signal or a block that never ran)";
  throw TimeoutError(os.str());
}

}  // namespace fusedcoll::gpu
