// nanobind module exporting the CUDA handlers and the device facts they dispatch on.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>

#include "common/registrations.h"
#include "cuda/device_facts.h"
#include "xla/ffi/api/ffi.h"

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormNormFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormNormBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormAddNormFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormAddNormBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSoftmaxFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSoftmaxBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdV2Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyBwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdGradCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleV2Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleWithTopKCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleByMassCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormFilterCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormFilterV2Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormTopKCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadOffsetsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadUnpackCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadUnpack3Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadPackCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadPack3Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormDecodeAttentionCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormDecodeAttentionAppendCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormLinearAttentionCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormLinearAttentionRank1Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormEmbedFwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormEmbedBwdCuda);

NB_MODULE(_jaxnorm_cuda, m) {
  m.def("registrations", []() {
    nanobind::dict d;
    JN_REGISTER(d, "jaxnorm_norm_fwd", JaxnormNormFwdCuda);
    JN_REGISTER(d, "jaxnorm_norm_bwd", JaxnormNormBwdCuda);
    JN_REGISTER(d, "jaxnorm_add_norm_fwd", JaxnormAddNormFwdCuda);
    JN_REGISTER(d, "jaxnorm_add_norm_bwd", JaxnormAddNormBwdCuda);
    JN_REGISTER(d, "jaxnorm_softmax_fwd", JaxnormSoftmaxFwdCuda);
    JN_REGISTER(d, "jaxnorm_softmax_bwd", JaxnormSoftmaxBwdCuda);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd", JaxnormCrossEntropyFwdCuda);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd_v2", JaxnormCrossEntropyFwdV2Cuda);
    JN_REGISTER(d, "jaxnorm_cross_entropy_bwd", JaxnormCrossEntropyBwdCuda);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd_grad", JaxnormCrossEntropyFwdGradCuda);
    JN_REGISTER(d, "jaxnorm_sample", JaxnormSampleCuda);
    JN_REGISTER(d, "jaxnorm_sample_v2", JaxnormSampleV2Cuda);
    JN_REGISTER(d, "jaxnorm_sample_with_top_k", JaxnormSampleWithTopKCuda);
    JN_REGISTER(d, "jaxnorm_sample_by_mass", JaxnormSampleByMassCuda);
    JN_REGISTER(d, "jaxnorm_filter", JaxnormFilterCuda);
    JN_REGISTER(d, "jaxnorm_filter_v2", JaxnormFilterV2Cuda);
    JN_REGISTER(d, "jaxnorm_top_k", JaxnormTopKCuda);
    JN_REGISTER(d, "jaxnorm_pad_offsets", JaxnormPadOffsetsCuda);
    JN_REGISTER(d, "jaxnorm_pad_unpack", JaxnormPadUnpackCuda);
    JN_REGISTER(d, "jaxnorm_pad_unpack3", JaxnormPadUnpack3Cuda);
    JN_REGISTER(d, "jaxnorm_pad_pack", JaxnormPadPackCuda);
    JN_REGISTER(d, "jaxnorm_pad_pack3", JaxnormPadPack3Cuda);
    JN_REGISTER(d, "jaxnorm_decode_attention", JaxnormDecodeAttentionCuda);
    JN_REGISTER(d, "jaxnorm_decode_attention_append", JaxnormDecodeAttentionAppendCuda);
    JN_REGISTER(d, "jaxnorm_linear_attention", JaxnormLinearAttentionCuda);
    JN_REGISTER(d, "jaxnorm_linear_attention_rank1", JaxnormLinearAttentionRank1Cuda);
    JN_REGISTER(d, "jaxnorm_embed_fwd", JaxnormEmbedFwdCuda);
    JN_REGISTER(d, "jaxnorm_embed_bwd", JaxnormEmbedBwdCuda);
    return d;
  });
  // Reads the current device (initializing CUDA): call only once JAX has a GPU backend.
  m.def("device_summary", []() {
    const jaxnorm::DeviceFacts& f = jaxnorm::device_facts();
    nanobind::dict d;
    d["device"] = f.device;
    d["sms"] = f.sms;
    d["compute_capability_major"] = f.cc_major;
    d["max_smem_optin"] = f.max_smem_optin;
    d["l2_bytes"] = f.l2_bytes;
    d["clusters"] = f.clusters;
    return d;
  });
}
