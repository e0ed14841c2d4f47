#pragma once
/// @file
/// The shared tile kernels. ref/ and emu/ (and the CPU side of every later backend) call these
/// very functions, compiled once in core/kernels.cpp with FP contraction off, so the bits of a tile
/// cannot drift between backends. Each kernel computes whole output elements in the order pinned
/// by docs/semantics.md; tiles split output dimensions only.
///
/// The kernels assume validated arguments (the ops' `check` ran) and never throw.

#include <cstdint>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/dtype.hpp"
#include "fusedcoll/embedding_alltoall.hpp"

namespace fusedcoll::detail {

/// Pools the bags `[b_begin, b_end)` of one table. `offsets` is the table's whole `[B + 1]` array
/// and `indices`/`weights` its whole index and weight arrays (`weights` may be null). Bag `b`
/// lands at `out + (b - b_begin) * out_stride`, `dim` floats.
void embedding_bag_rows(const float* table, std::int64_t table_stride, std::int64_t dim,
                        const std::int64_t* offsets, const std::int64_t* indices,
                        const float* weights, PoolingMode mode, std::int64_t b_begin,
                        std::int64_t b_end, float* out, std::int64_t out_stride) noexcept;
/// The same for i32 offsets and indices.
void embedding_bag_rows(const float* table, std::int64_t table_stride, std::int64_t dim,
                        const std::int32_t* offsets, const std::int32_t* indices,
                        const float* weights, PoolingMode mode, std::int64_t b_begin,
                        std::int64_t b_end, float* out, std::int64_t out_stride) noexcept;

/// GEMV rows `[n_begin, n_end)`: `y[i][n] = sum_k x[i][k] * w[n][k]` for `i < m`, increasing `k`
/// from +0.0f. `w` is `[N, k]` with row stride `ldw`, `x` is `[m, k]` with row stride `ldx`,
/// `y` is `[m, N]` with row stride `ldy`; `m <= kMaxGemvRows`.
void gemv_rows(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx, std::int64_t m,
               std::int64_t k, std::int64_t n_begin, std::int64_t n_end, float* y,
               std::int64_t ldy) noexcept;

/// GEMM tile: `c[r][j] = sum_k a[r][k] * b[k][j]` for `r` in `[0, rows)` and `j` in
/// `[0, cols)`, increasing `k` from +0.0f. Row strides `lda`, `ldb`, `ldc`; callers offset the
/// pointers to the tile's corner.
void gemm_tile(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
               std::int64_t ldc, std::int64_t rows, std::int64_t cols, std::int64_t k) noexcept;
/// Rows of `gemm_tile`'s micro-kernel on this CPU (the instruction set it dispatches to): a tile
/// of r rows costs ceil(r / this) whole micro-kernel rows of arithmetic, after packing its panel
/// of `b`. The cost model's `device.gemm_pack_rows` for this machine (docs/simulation.md).
int gemm_tile_row_block() noexcept;

/// `acc[i] = acc[i] (op) v[i]` for `count` elements of `dtype` (f32, i32 or i64), operand order as
/// written (it matters for NaN payloads). `avg` accumulates like `sum`; see `finish_average`.
void reduce_into(void* acc, const void* v, std::int64_t count, DType dtype, ReduceOp op) noexcept;

/// Divides `count` elements of `dtype` by `world_size` in place (the last step of `avg`).
void finish_average(void* acc, std::int64_t count, DType dtype, int world_size) noexcept;

}  // namespace fusedcoll::detail
