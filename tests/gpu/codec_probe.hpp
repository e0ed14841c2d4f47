#pragma once
// The device side of the codec test (gpu_collectives_test.cpp): gpu/wire_codec.hpp run by a
// kernel over host-given inputs. Plain C++ interface, as signal_probe.hpp (the test itself is
// host code).

#include <cstdint>
#include <vector>

namespace fusedcoll::gpu::testing {

/// codes[i] = encode(format, x[i] * scale) on the device (`scale` <= 0: unscaled), and back[i]
/// the f32 bits of decode(codes[i]) / scale. `format` is a WireFormat value other than none.
void device_codec(int format, bool saturate, float scale, const std::vector<float>& x,
                  std::vector<std::uint32_t>& codes, std::vector<std::uint32_t>& back);

/// The f32 bits of decode(c) on the device for every code c of the format (2^8 or 2^16).
std::vector<std::uint32_t> device_decode_all(int format);

}  // namespace fusedcoll::gpu::testing
