// The collectives' plan (detail/collective_plan.hpp): the schedules every backend and the
// simulator run, built from the agreed arguments alone.

#include "fusedcoll/detail/collective_plan.hpp"

#include <utility>

#include "fusedcoll/collectives.hpp"

namespace fusedcoll::detail::collective {

Parts Parts::chunks(std::int64_t count, int P) {
  Parts p;
  for (int q = 0; q < P; ++q) {
    const Chunk c = chunk_of(count, P, q);
    p.off.push_back(c.offset);
    p.len.push_back(c.length);
    p.max_len = std::max(p.max_len, c.length);
  }
  p.total = count;
  return p;
}

Parts Parts::counts(const std::vector<std::int64_t>& counts) {
  Parts p;
  for (std::int64_t n : counts) {
    p.off.push_back(p.total);
    p.len.push_back(n);
    p.max_len = std::max(p.max_len, n);
    p.total += n;
  }
  return p;
}

OwnerPlan::OwnerPlan(Parts parts_in, int me_in, int P_in, const Tiling& tiling,
                     std::size_t tile_elem, bool gather_in)
    : parts(std::move(parts_in)),
      P(P_in),
      me(me_in),
      gather(gather_in),
      order(remote_first(me_in, P_in)) {
  if (parts.max_len == 0) return;  // nothing moves; every rank agrees
  te = tiling.elems(parts.max_len, tile_elem);
  tiles = num_tiles(parts.max_len, te);
  for (int q : order)
    for (int t = 0; t < num_tiles(parts.len[q], te); ++t) {
      if (q != me) scatter.push_back({q, t});
      if (q != me && gather) collect.push_back({q, t});
    }
  for (int t = 0; t < num_tiles(parts.len[me], te); ++t) reduce.push_back({me, t});
}

}  // namespace fusedcoll::detail::collective
