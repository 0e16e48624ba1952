// FlashInfer's samplers and top-k, called from its CUDA headers (no Python package), for the
// sampling benchmark's same-call comparison (benchmarks/gpu_sampling.sh builds and runs it;
// benchmarks/flashinfer_ncu.py reads its Nsight Compute output). Extends
// ../shared/anchors/flashinfer_sampling.cu with the modes that give jaxnorm's contract:
//   - samplers with deterministic=true (FlashInfer's Python default; jaxnorm's draws are bitwise
//     reproducible) as well as false;
//   - top_k sorted, deterministic, ties to the smaller index (lax.top_k's and jaxnorm.top_k's
//     output), as well as FlashInfer's default (unsorted, not deterministic).
// Each entry is enclosed by two launches of fis_marker, so the profile's kernels can be assigned
// to entries by order. f32 logits ~ N(0, 3^2). FIS_REPS (default 50): calls timed per entry with
// CUDA events after an L2 flush (median); under Nsight Compute use a small value.
// Headers: flashinfer-python==0.6.13's flashinfer/data/include, unzipped into .fi/include.
#include <flashinfer/sampling.cuh>
#include <flashinfer/topk.cuh>
#include <curand.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1);} } while (0)

using namespace flashinfer::sampling;
static void* flush_buf;
static const size_t FLUSH = 256u << 20;
static int reps = 50;

__global__ void fis_marker(int) {}

static double time_us(const std::function<void()>& f) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  f(); CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaMemsetAsync(flush_buf, i & 0xff, FLUSH));
    CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); ts.push_back(ms * 1e3f);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main() {
  if (const char* r = std::getenv("FIS_REPS")) reps = std::max(1, atoi(r));
  CK(cudaMalloc(&flush_buf, FLUSH));
  struct S { uint32_t B, V; } shapes[] = {{1, 128256}, {64, 128256}, {256, 151936}};
  curandGenerator_t g; curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);
  curandSetPseudoRandomGeneratorSeed(g, 0);
  const size_t kRowState = 16u << 20;
  printf("calls per entry: %d (plus one warm-up)\n", reps);
  for (auto s : shapes) {
    size_t n = size_t(s.B) * s.V;
    float *logits, *probs, *vals; int *out, *idx; bool* valid; void* ws; RadixRowState* rs;
    CK(cudaMalloc(&logits, n * 4)); CK(cudaMalloc(&probs, n * 4));
    CK(cudaMalloc(&vals, s.B * 1024 * 4)); CK(cudaMalloc(&idx, s.B * 1024 * 4));
    CK(cudaMalloc(&out, s.B * 4)); CK(cudaMalloc(&valid, s.B));
    CK(cudaMalloc(&ws, 8u << 20)); CK(cudaMalloc(&rs, kRowState)); CK(cudaMemset(rs, 0, kRowState));
    curandGenerateNormal(g, logits, n, 0.f, 3.f);
    uint64_t off = 0;
    auto softmax = [&] { CK(OnlineSoftmax<float>(logits, probs, s.B, s.V, nullptr, 0.8f, ws, 8u << 20, false)); };
    softmax(); CK(cudaDeviceSynchronize());
    printf("B=%u V=%u floor(read f32 @3TB/s) %.1f us\n", s.B, s.V, n * 4 / 3.0e12 * 1e6);
    auto say = [&](const char* k, const std::function<void()>& f) {
      fis_marker<<<1, 1>>>(0);
      const double us = time_us(f);
      fis_marker<<<1, 1>>>(1);
      printf("  ENTRY B=%u V=%u | %-52s %9.1f us\n", s.B, s.V, k, us);
      fflush(stdout);
    };
    say("softmax (OnlineSoftmax, temperature)", softmax);
    for (bool det : {false, true}) {
      const char* tag = det ? " det" : "";
      char name[96];
      auto named = [&](const char* base) { snprintf(name, sizeof name, "%s%s", base, tag); return name; };
      say(named("sampling_from_logits (Gumbel, no filter)"), [&] {
        CK((SamplingFromLogits<float, int>(logits, out, nullptr, s.B, s.V, det, nullptr, 42, nullptr, off++))); });
      say(named("top_k_sampling_from_probs k=50"), [&] {
        CK((TopKSamplingFromProb<float, int>(probs, out, valid, nullptr, nullptr, s.B, 50, s.V, det, nullptr, 42, nullptr, off++))); });
      say(named("top_p_sampling_from_probs p=0.9"), [&] {
        CK((TopPSamplingFromProb<float, int>(probs, out, valid, nullptr, nullptr, s.B, 0.9f, s.V, det, nullptr, 42, nullptr, off++))); });
      say(named("top_k_top_p_sampling_from_probs k=50 p=0.9"), [&] {
        CK((TopKTopPSamplingFromProb<float, int>(probs, nullptr, nullptr, out, valid, nullptr, s.B, 50, 0.9f, s.V, det, nullptr, 42, nullptr, off++))); });
      say(named("min_p_sampling_from_probs 0.1"), [&] {
        CK((MinPSamplingFromProb<float, int>(probs, nullptr, out, valid, nullptr, s.B, 0.1f, s.V, det, nullptr, 42, nullptr, off++))); });
    }
    for (uint32_t k : {50u, 1024u}) {
      char name[96];
      snprintf(name, sizeof name, "top_k k=%u (unsorted)", k);
      say(name, [&] { CK((TopKDispatch<float, int>(logits, idx, vals, s.B, k, s.V, rs))); });
      snprintf(name, sizeof name, "top_k k=%u sorted det ties-small", k);
      say(name, [&] {
        CK((TopKDispatch<float, int>(logits, idx, vals, s.B, k, s.V, rs, true, true, TopKTieBreak::Small))); });
    }
    CK(cudaFree(logits)); CK(cudaFree(probs)); CK(cudaFree(vals)); CK(cudaFree(idx));
    CK(cudaFree(out)); CK(cudaFree(valid)); CK(cudaFree(ws)); CK(cudaFree(rs));
  }
  return 0;
}
