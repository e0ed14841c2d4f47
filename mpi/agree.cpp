// A call's global fields as exchanged at entry (docs/semantics.md, "Cross-rank agreement"): the
// fields of detail/agreement.hpp, in its order. Enums travel as their frozen numeric values.

#include "fusedcoll/detail/agreement.hpp"
#include "mpi/ops.hpp"

namespace fusedcoll::mpi {

void throw_code(ErrorCode code, const std::string& message) {
  std::rethrow_exception(make_error(code, message));
}

namespace {

template <class T>
void put(Record& r, const T& v) {
  if constexpr (std::is_same_v<T, CompressionOptions>)
    detail::for_each_wire_field([&](const auto& f) { put(r, v.*f.member); });
  else if constexpr (requires { v.size(); })
    r.list(v);
  else
    r.i64(static_cast<std::int64_t>(v));
}

template <class T>
void get(Reader& r, T& v) {
  if constexpr (std::is_same_v<T, CompressionOptions>)
    detail::for_each_wire_field([&](const auto& f) { get(r, v.*f.member); });
  else if constexpr (requires { v.size(); })
    v = r.list<typename T::value_type>();
  else if constexpr (std::is_same_v<T, bool>)
    v = r.i64() != 0;
  else
    v = static_cast<T>(r.i64());
}

}  // namespace

template <class Args>
void encode(Record& r, const Args& a) {
  detail::for_each_agreed_field<Args>([&](const auto& f) { put(r, a.*f.member); });
}

template <class Args>
void decode(Reader& r, Args& a) {
  detail::for_each_agreed_field<Args>([&](const auto& f) { get(r, a.*f.member); });
}

#define FC_MPI_AGREE_(Args)                         \
  template void encode<Args>(Record&, const Args&); \
  template void decode<Args>(Reader&, Args&);
FC_MPI_AGREE_(EmbeddingAllToAllArgs)
FC_MPI_AGREE_(GemvAllReduceArgs)
FC_MPI_AGREE_(GemmAllToAllArgs)
FC_MPI_AGREE_(AllReduceArgs)
FC_MPI_AGREE_(AllToAllvArgs)
FC_MPI_AGREE_(ReduceScatterArgs)
FC_MPI_AGREE_(AllGatherArgs)
FC_MPI_AGREE_(BroadcastArgs)
#undef FC_MPI_AGREE_

}  // namespace fusedcoll::mpi
