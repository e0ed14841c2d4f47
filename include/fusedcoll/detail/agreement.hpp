#pragma once
// The global fields of every Args struct: the one list that says what ranks must agree on
// (docs/semantics.md, "Cross-rank agreement"). It drives `check_consistent` (ref/, emu/ and gpu/
// compare the calls in memory; mpi/ compares the decoded records of its peers) and mpi/'s
// encoding of a call for the exchange at entry, so a new global field is added here and nowhere
// else.

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/compression.hpp"
#include "fusedcoll/embedding_alltoall.hpp"
#include "fusedcoll/error.hpp"
#include "fusedcoll/gemm_alltoall.hpp"
#include "fusedcoll/gemv_allreduce.hpp"

namespace fusedcoll::detail {

/// A pointer to a member of `Args` of type `T`. Through an alias: nvcc's front end rewrites a
/// field declared `T Args::*member` as `T (Args::*member)`, on which the host compiler warns
/// (-Wparentheses, an error under -Werror).
template <class Args, class T>
using MemberOf = T Args::*;

/// A scalar global field (an integer, an enum or a bool); `label` completes "disagree on ...".
template <class Args, class T>
struct Scalar {
  const char* label;
  MemberOf<Args, T> member;
};

/// A list global field: its length (`count_label`) and then every element (`name[i]`) must agree.
template <class Args, class T>
struct List {
  const char* name;
  const char* count_label;
  MemberOf<Args, std::vector<T>> member;
};

/// A call's wire compression options, all of them global; `op` names the collective in messages.
template <class Args>
struct Wire {
  const char* op;
  MemberOf<Args, CompressionOptions> member;
};

/// A list every rank sends its peers without it being global (All-to-All(v)'s counts): the Args'
/// own pairwise rule (`Agreement<Args>::pairwise`) compares it.
template <class Args, class T>
struct Exchanged {
  MemberOf<Args, std::vector<T>> member;
};

/// `Agreement<Args>::fields()`: the global and exchanged fields of `Args`, in the order in which
/// a mismatch is looked for. `pairwise(a, rank_a, b, rank_b)`, where present, checks what is not a
/// plain equality.
template <class Args>
struct Agreement;

template <>
struct Agreement<EmbeddingAllToAllArgs> {
  using A = EmbeddingAllToAllArgs;
  static constexpr auto fields() {
    return std::tuple{
        Scalar<A, std::int64_t>{"dim", &A::dim},
        Scalar<A, PoolingMode>{"the pooling mode", &A::pooling},
        List<A, int>{"owner", "the number of tables", &A::owner},
        List<A, std::int64_t>{"batch_sizes", "the number of batch ranges", &A::batch_sizes}};
  }
};

template <>
struct Agreement<GemvAllReduceArgs> {
  using A = GemvAllReduceArgs;
  static constexpr auto fields() {
    return std::tuple{Scalar<A, std::int64_t>{"m", &A::m}, Scalar<A, std::int64_t>{"n", &A::n},
                      List<A, std::int64_t>{"k_splits", "the number of k_splits", &A::k_splits}};
  }
};

template <>
struct Agreement<GemmAllToAllArgs> {
  using A = GemmAllToAllArgs;
  static constexpr auto fields() {
    return std::tuple{
        Scalar<A, std::int64_t>{"k", &A::k}, Scalar<A, std::int64_t>{"n", &A::n},
        List<A, int>{"host", "the number of experts", &A::host},
        List<A, std::int64_t>{"counts", "the size of the routing matrix", &A::counts}};
  }
};

template <>
struct Agreement<AllReduceArgs> {
  using A = AllReduceArgs;
  static constexpr auto fields() {
    return std::tuple{Scalar<A, std::int64_t>{"the AllReduce count", &A::count},
                      Scalar<A, DType>{"the AllReduce dtype", &A::dtype},
                      Scalar<A, ReduceOp>{"the AllReduce op", &A::op},
                      Scalar<A, AllReduceAlgo>{"the AllReduce algorithm", &A::algo},
                      Wire<A>{"AllReduce", &A::wire}};
  }
};

template <>
struct Agreement<AllToAllvArgs> {
  using A = AllToAllvArgs;
  static constexpr auto fields() {
    return std::tuple{Scalar<A, DType>{"the All-to-All dtype", &A::dtype},
                      Wire<A>{"All-to-All", &A::wire}, Exchanged<A, std::int64_t>{&A::send_counts},
                      Exchanged<A, std::int64_t>{&A::recv_counts}};
  }
  /// What rank a sends rank b is what b expects from a, and the other way round.
  static void pairwise(const A& a, int rank_a, const A& b, int rank_b) {
    FC_ENFORCE_EQ(a.send_counts[rank_b], b.recv_counts[rank_a], "rank ", rank_a, " sends ",
                  a.send_counts[rank_b], " elements to rank ", rank_b, ", which expects ",
                  b.recv_counts[rank_a]);
    FC_ENFORCE_EQ(b.send_counts[rank_a], a.recv_counts[rank_b], "rank ", rank_b, " sends ",
                  b.send_counts[rank_a], " elements to rank ", rank_a, ", which expects ",
                  a.recv_counts[rank_b]);
  }
};

template <>
struct Agreement<ReduceScatterArgs> {
  using A = ReduceScatterArgs;
  static constexpr auto fields() {
    return std::tuple{
        Scalar<A, DType>{"the ReduceScatter dtype", &A::dtype},
        Scalar<A, ReduceOp>{"the ReduceScatter op", &A::op}, Wire<A>{"ReduceScatter", &A::wire},
        List<A, std::int64_t>{"recv_counts", "the number of recv_counts", &A::recv_counts}};
  }
};

template <>
struct Agreement<AllGatherArgs> {
  using A = AllGatherArgs;
  static constexpr auto fields() {
    return std::tuple{
        Scalar<A, DType>{"the AllGather dtype", &A::dtype}, Wire<A>{"AllGather", &A::wire},
        List<A, std::int64_t>{"recv_counts", "the number of recv_counts", &A::recv_counts}};
  }
};

template <>
struct Agreement<BroadcastArgs> {
  using A = BroadcastArgs;
  static constexpr auto fields() {
    return std::tuple{Scalar<A, std::int64_t>{"the Broadcast count", &A::count},
                      Scalar<A, DType>{"the Broadcast dtype", &A::dtype},
                      Scalar<A, int>{"the Broadcast root", &A::root}};
  }
};

/// The wire options' fields, as `Scalar`s of `CompressionOptions` ("the <op> wire <label>").
constexpr auto wire_fields() {
  using W = CompressionOptions;
  return std::tuple{Scalar<W, WireFormat>{"format", &W::format},
                    Scalar<W, Overflow>{"overflow mode", &W::overflow},
                    Scalar<W, Scaling>{"scaling", &W::scaling},
                    Scalar<W, std::int64_t>{"scale block", &W::block},
                    Scalar<W, bool>{"pow2_scale", &W::pow2_scale},
                    Scalar<W, bool>{"predivide", &W::predivide}};
}

/// Calls `f(field)` for each field of `Agreement<Args>`, in order.
template <class Args, class F>
void for_each_agreed_field(F&& f) {
  std::apply([&](const auto&... field) { (f(field), ...); }, Agreement<Args>::fields());
}

/// Calls `f(field)` for each field of the wire options, in order.
template <class F>
void for_each_wire_field(F&& f) {
  std::apply([&](const auto&... field) { (f(field), ...); }, wire_fields());
}

/// A value as messages show it: enums by name and number where they have a name.
template <class T>
std::string shown(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    if constexpr (requires { to_string(v); })
      return make_string(to_string(v), "(", static_cast<std::int64_t>(v), ")");
    else
      return make_string(static_cast<std::int64_t>(v));
  } else {
    return make_string(v);
  }
}

[[noreturn]] inline void throw_disagreement(int rank_a, int rank_b, const std::string& label,
                                            const std::string& va, const std::string& vb) {
  throw_at<InvalidArgument>(
      __FILE__, __LINE__,
      make_string("check failed: ", label, " differs between ranks (", va, " vs ", vb, ")"),
      make_string("rank ", rank_a, " and rank ", rank_b, " disagree on ", label));
}

/// The cold half of `agree_value`, out of line so that the comparisons stay small.
template <class T, class Label>
[[noreturn, gnu::noinline, gnu::cold]] void disagree(const T& a, int rank_a, const T& b, int rank_b,
                                                     const Label& label) {
  if constexpr (std::is_invocable_v<const Label&>)
    throw_disagreement(rank_a, rank_b, label(), shown(a), shown(b));
  else
    throw_disagreement(rank_a, rank_b, label, shown(a), shown(b));
}

/// Throws unless `a == b`. `label` is a string, or a callable that returns one: names of list
/// entries and wire fields are built only for a mismatch, not on every call.
template <class T, class Label>
void agree_value(const T& a, int rank_a, const T& b, int rank_b, const Label& label) {
  if (!(a == b)) [[unlikely]]
    disagree(a, rank_a, b, rank_b, label);
}

/// Throws `InvalidArgument` naming the first global field on which two ranks' calls differ, then
/// applies the Args' pairwise rule. The one consistency check every backend runs.
template <class Args>
void check_agreement(const Args& a, int rank_a, const Args& b, int rank_b) {
  for_each_agreed_field<Args>([&](const auto& field) {
    using Field = std::decay_t<decltype(field)>;
    if constexpr (requires { field.label; }) {
      agree_value(a.*field.member, rank_a, b.*field.member, rank_b, field.label);
    } else if constexpr (requires { field.count_label; }) {
      const auto& va = a.*field.member;
      const auto& vb = b.*field.member;
      if (va == vb) [[likely]]
        return;
      agree_value(va.size(), rank_a, vb.size(), rank_b, field.count_label);
      for (std::size_t i = 0; i < va.size(); ++i)
        agree_value(va[i], rank_a, vb[i], rank_b,
                    [&] { return make_string(field.name, "[", i, "]"); });
    } else if constexpr (requires { field.op; }) {
      const CompressionOptions& wa = a.*field.member;
      const CompressionOptions& wb = b.*field.member;
      if (wa == wb) [[likely]]
        return;
      for_each_wire_field([&](const auto& w) {
        agree_value(wa.*w.member, rank_a, wb.*w.member, rank_b,
                    [&] { return make_string("the ", field.op, " wire ", w.label); });
      });
    } else {
      static_assert(std::is_same_v<Field, Exchanged<Args, std::int64_t>>);
    }
  });
  if constexpr (requires { Agreement<Args>::pairwise(a, rank_a, b, rank_b); })
    Agreement<Args>::pairwise(a, rank_a, b, rank_b);
}

}  // namespace fusedcoll::detail
