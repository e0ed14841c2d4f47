// Kernels of the device codec test (tests/gpu/codec_probe.hpp).

#include "tests/gpu/codec_probe.hpp"

#include "gpu/runtime.hpp"
#include "gpu/wire_codec.hpp"

namespace fusedcoll::gpu::testing {
namespace {

__global__ void codec_kernel(codec::Wire w, const float* x, std::int64_t n, std::uint32_t* codes,
                             std::uint32_t* back) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t c = w.encode_at(x[i], i);
    codes[i] = c;
    back[i] = codec::bits_of(w.decode_at(c, i));
  }
}

__global__ void decode_kernel(int format, std::uint32_t n, std::uint32_t* out) {
  for (std::uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x)
    out[c] = codec::bits_of(codec::decode(format, c));
}

}  // namespace

void device_codec(int format, bool saturate, float scale, const std::vector<float>& x,
                  std::vector<std::uint32_t>& codes, std::vector<std::uint32_t>& back) {
  const std::size_t n = x.size();
  DeviceBuffer dx(n * 4), dc(n * 4), db(n * 4), ds(4);
  FC_CHECK_GPU(gpuMemcpy(dx.get(), x.data(), n * 4, gpuMemcpyHostToDevice));
  FC_CHECK_GPU(gpuMemcpy(ds.get(), &scale, 4, gpuMemcpyHostToDevice));
  codec::Wire w;
  w.format = format;
  w.saturate = saturate;
  w.block = 0;
  w.scales = scale > 0 ? ds.as<float>() : nullptr;
  codec_kernel<<<1024, kThreads>>>(w, dx.as<float>(), static_cast<std::int64_t>(n),
                                   dc.as<std::uint32_t>(), db.as<std::uint32_t>());
  FC_CHECK_GPU(gpuGetLastError());
  FC_CHECK_GPU(gpuDeviceSynchronize());
  codes.resize(n);
  back.resize(n);
  FC_CHECK_GPU(gpuMemcpy(codes.data(), dc.get(), n * 4, gpuMemcpyDeviceToHost));
  FC_CHECK_GPU(gpuMemcpy(back.data(), db.get(), n * 4, gpuMemcpyDeviceToHost));
}

std::vector<std::uint32_t> device_decode_all(int format) {
  const std::uint32_t n = 1u << (8 * codec::wire_bytes(format));
  DeviceBuffer d(n * 4);
  decode_kernel<<<64, kThreads>>>(format, n, d.as<std::uint32_t>());
  FC_CHECK_GPU(gpuGetLastError());
  FC_CHECK_GPU(gpuDeviceSynchronize());
  std::vector<std::uint32_t> out(n);
  FC_CHECK_GPU(gpuMemcpy(out.data(), d.get(), n * 4, gpuMemcpyDeviceToHost));
  return out;
}

}  // namespace fusedcoll::gpu::testing
