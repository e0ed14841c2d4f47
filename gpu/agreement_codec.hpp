#pragma once
// A call's global fields (detail/agreement.hpp) as bytes, for process mode's entry exchange
// (gpu/process.hpp, agree_world): every rank sends its own and rebuilds its peers' calls, agreed
// fields only, which detail::check_all_agree then compares exactly as the single-GPU mode compares
// the calls it has in memory. Plain host code, tested on the CPU (tests/gpu_agreement_test.cpp).
// The MPI backend has its own record format (mpi/agree.cpp), private to it.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "fusedcoll/detail/agreement.hpp"
#include "fusedcoll/detail/validate.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::gpu {
namespace agreement {

/// Scalars (integers, enums, bools) as one int64 word; lists as their length and elements; wire
/// options field by field.
template <class T>
void put(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, CompressionOptions>) {
    detail::for_each_wire_field([&](const auto& f) { put(out, v.*f.member); });
  } else if constexpr (requires { v.size(); }) {
    put(out, static_cast<std::int64_t>(v.size()));
    for (const auto& x : v) put(out, x);
  } else {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>, "a global field is an integer word");
    const auto w = static_cast<std::int64_t>(v);
    out.append(reinterpret_cast<const char*>(&w), sizeof w);
  }
}

template <class T>
void get(const std::string& in, std::size_t& at, T& v) {
  if constexpr (std::is_same_v<T, CompressionOptions>) {
    detail::for_each_wire_field([&](const auto& f) { get(in, at, v.*f.member); });
  } else if constexpr (requires { v.size(); }) {
    std::int64_t n = 0;
    get(in, at, n);
    FC_CHECK_INTERNAL(n >= 0 && static_cast<std::size_t>(n) <= (in.size() - at) / 8,
                      "agreement record: a list of ", n, " words in ", in.size() - at, " bytes");
    v.resize(static_cast<std::size_t>(n));
    for (auto& x : v) get(in, at, x);
  } else {
    std::int64_t w = 0;
    FC_CHECK_INTERNAL(at + sizeof w <= in.size(), "short agreement record (", in.size(), " bytes)");
    std::memcpy(&w, in.data() + at, sizeof w);
    at += sizeof w;
    if constexpr (std::is_same_v<T, bool>)
      v = w != 0;
    else
      v = static_cast<T>(w);
  }
}

}  // namespace agreement

/// `a`'s global (and exchanged) fields as bytes.
template <class Args>
std::string encode_agreed(const Args& a) {
  std::string out;
  detail::for_each_agreed_field<Args>([&](const auto& f) { agreement::put(out, a.*f.member); });
  return out;
}

/// A call with only the fields `encode_agreed` wrote set; InternalError on a malformed record.
template <class Args>
Args decode_agreed(const std::string& bytes) {
  Args a{};
  std::size_t at = 0;
  detail::for_each_agreed_field<Args>(
      [&](const auto& f) { agreement::get(bytes, at, a.*f.member); });
  FC_CHECK_INTERNAL(at == bytes.size(), "agreement record of ", bytes.size(), " bytes, ", at,
                    " read");
  return a;
}

/// Process mode's entry of a call (docs/gpu.md, "Process mode"; gpu/process.hpp's agree_world
/// and the CPU suite's replay of it): validates this rank's own call, gives every rank's global
/// fields to `exchange(bytes)`, which returns every rank's (index = rank: the call's rendezvous),
/// and checks their agreement exactly as the single mode does with every rank's call in memory,
/// so a mismatch is the same InvalidArgument on every rank before any data moves. Returns every
/// rank's call with only its global fields set (this rank's is `mine` itself).
template <class Args, class Exchange>
std::vector<Args> agree_calls(int me, int P, const Args& mine, Exchange&& exchange) {
  check(mine, me, P);
  const std::vector<std::string> blobs = exchange(encode_agreed(mine));
  FC_CHECK_INTERNAL(static_cast<int>(blobs.size()) == P, "agreement: ", blobs.size(),
                    " records for ", P, " ranks");
  std::vector<Args> all(blobs.size());
  for (std::size_t r = 0; r < blobs.size(); ++r)
    all[r] = static_cast<int>(r) == me ? mine : decode_agreed<Args>(blobs[r]);
  detail::check_all_agree(P,
                          [&](int r) -> const Args& { return all[static_cast<std::size_t>(r)]; });
  return all;
}

}  // namespace fusedcoll::gpu
