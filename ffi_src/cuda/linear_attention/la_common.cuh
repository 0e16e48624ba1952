// Causal linear attention on CUDA, shared by the tensor-core (la_mma.cuh) and CUDA-core
// (la_simt.cuh) kernels: parameters, the work of a CTA, and the parts' states.
//
// A CTA takes one row (batch x head), one slice of c's columns and one part of the sequence (a
// range of chunks), and walks the part's chunks in order (backwards when `reverse`), carrying the
// state S (k_dim x slice, float32) and z (k_dim). With more than one part, a first launch
// (`state_only`) writes each part's own sums to the workspace, `part_prefix_kernel` turns them
// into each part's sum of the parts before it (added in walking order), and the second starts
// each part from that one slot: no atomics, bitwise reproducible.
// The rank-1 form (score a_i . b_j + alpha_i beta_j) also carries w = sum beta_j c_j and
// u = sum beta_j: the state is that of [b, beta]^T [c, 1], (K+1) x (V+1).
#pragma once

#include <cstdint>

#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace linattn {

struct Params {
  const void *a, *b, *c;
  const float *alpha, *beta;  // the rank-1 term, or null
  void* out;
  float* den;
  float* states;  // (rows, parts, (K + 1) x (V + 1)): [[S, z], [w, u]] row-major
  int64_t rows;
  int len, k_dim, v_dim, slices, parts, chunks, chunks_per_part;
  float eps;
  bool normalize, reverse, state_only;
  bool f32_out;  // out is float32 (forward mode's tangents), whatever the operands' dtype
};

struct Work {
  int64_t row;
  int slice, part, first, count;  // chunks [first, first + count) of the sequence
};

// The CTA's work: blockIdx.x = (row * slices + slice) * launched parts + index. The state-only
// launch skips the part whose state nobody reads (the last one in walking order).
__device__ __forceinline__ Work work_of(const Params& p) {
  const int launched = p.state_only ? p.parts - 1 : p.parts;
  Work w;
  const int64_t x = blockIdx.x;
  const int idx = static_cast<int>(x % launched);
  const int64_t rs = x / launched;
  w.slice = static_cast<int>(rs % p.slices);
  w.row = rs / p.slices;
  w.part = p.state_only && p.reverse ? idx + 1 : idx;
  w.first = w.part * p.chunks_per_part;
  const int end = min(p.chunks, w.first + p.chunks_per_part);
  w.count = max(0, end - w.first);
  return w;
}

// The chunk walked at step i of the CTA's part.
__device__ __forceinline__ int chunk_at(const Params& p, const Work& w, int i) {
  return p.reverse ? w.first + w.count - 1 - i : w.first + i;
}

// A part's augmented state; element (k, v) at k * (v_dim + 1) + v.
template <int K>
__device__ __forceinline__ float* part_state(const Params& p, int64_t row, int part) {
  return p.states + (row * p.parts + part) * int64_t{K + 1} * (p.v_dim + 1);
}

// Offset of the augmented state's element (k, v): row K holds w and u, column v_dim z and u.
__device__ __forceinline__ int64_t state_offset(const Params& p, int k, int v) { return int64_t{k} * (p.v_dim + 1) + v; }

// The part walked first (it starts from zeros; its slot keeps its own sums).
__device__ __forceinline__ int first_part(const Params& p) { return p.reverse ? p.parts - 1 : 0; }

// The most parts a sequence is cut into: jaxnorm._ops.linear_attention_parts's bound.
constexpr int kMaxParts = 32;

// In place, for every row and element of the augmented state: slot q becomes the sum of the
// states of the parts walked before q (the state-only launch wrote every slot but the last
// part's). One thread an element, the parts added in walking order; a CTA reads one slot after
// it instead of adding up to 31 of them on its critical path. Every load is issued before the
// first store (the compiler cannot move a load past a store to the same array).
__global__ void part_prefix_kernel(Params p) {
  const int64_t elems = int64_t{p.k_dim + 1} * (p.v_dim + 1);
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= p.rows * elems) return;
  float* s = p.states + (i / elems) * p.parts * elems + i % elems;
  auto slot = [&](int idx) { return s + (p.reverse ? p.parts - 1 - idx : idx) * elems; };
  float own[kMaxParts];
#pragma unroll
  for (int idx = 0; idx < kMaxParts; ++idx) own[idx] = idx + 1 < p.parts ? *slot(idx) : 0.f;
  float run = 0.f;
#pragma unroll
  for (int idx = 0; idx < kMaxParts; ++idx) {
    if (idx >= p.parts) break;
    if (idx > 0) *slot(idx) = run;
    run += own[idx];
  }
}

}  // namespace linattn
}  // namespace jaxnorm
