// nanobind module exporting the CPU handlers.
#include <nanobind/nanobind.h>

#include "common/registrations.h"
#include "xla/ffi/api/ffi.h"

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormNormFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormNormBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormAddNormFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormAddNormBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSoftmaxFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSoftmaxBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdGradCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormSampleByMassCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormFilterCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormFilterV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormTopKCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadOffsetsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadUnpackCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadUnpack3Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadPackCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormPadPack3Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormDecodeAttentionCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormDecodeAttentionAppendCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormEmbedFwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormEmbedBwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormLinearAttentionCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxnormLinearAttentionRank1Cpu);

NB_MODULE(_jaxnorm_cpu, m) {
  m.def("registrations", []() {
    nanobind::dict d;
    JN_REGISTER(d, "jaxnorm_norm_fwd", JaxnormNormFwdCpu);
    JN_REGISTER(d, "jaxnorm_norm_bwd", JaxnormNormBwdCpu);
    JN_REGISTER(d, "jaxnorm_add_norm_fwd", JaxnormAddNormFwdCpu);
    JN_REGISTER(d, "jaxnorm_add_norm_bwd", JaxnormAddNormBwdCpu);
    JN_REGISTER(d, "jaxnorm_softmax_fwd", JaxnormSoftmaxFwdCpu);
    JN_REGISTER(d, "jaxnorm_softmax_bwd", JaxnormSoftmaxBwdCpu);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd", JaxnormCrossEntropyFwdCpu);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd_v2", JaxnormCrossEntropyFwdV2Cpu);
    JN_REGISTER(d, "jaxnorm_cross_entropy_bwd", JaxnormCrossEntropyBwdCpu);
    JN_REGISTER(d, "jaxnorm_cross_entropy_fwd_grad", JaxnormCrossEntropyFwdGradCpu);
    JN_REGISTER(d, "jaxnorm_sample", JaxnormSampleCpu);
    JN_REGISTER(d, "jaxnorm_sample_v2", JaxnormSampleV2Cpu);
    JN_REGISTER(d, "jaxnorm_sample_with_top_k", JaxnormSampleV2Cpu);  // one CPU sampler for both
    JN_REGISTER(d, "jaxnorm_sample_by_mass", JaxnormSampleByMassCpu);
    JN_REGISTER(d, "jaxnorm_filter", JaxnormFilterCpu);
    JN_REGISTER(d, "jaxnorm_filter_v2", JaxnormFilterV2Cpu);
    JN_REGISTER(d, "jaxnorm_top_k", JaxnormTopKCpu);
    JN_REGISTER(d, "jaxnorm_pad_offsets", JaxnormPadOffsetsCpu);
    JN_REGISTER(d, "jaxnorm_pad_unpack", JaxnormPadUnpackCpu);
    JN_REGISTER(d, "jaxnorm_pad_unpack3", JaxnormPadUnpack3Cpu);
    JN_REGISTER(d, "jaxnorm_pad_pack", JaxnormPadPackCpu);
    JN_REGISTER(d, "jaxnorm_pad_pack3", JaxnormPadPack3Cpu);
    JN_REGISTER(d, "jaxnorm_decode_attention", JaxnormDecodeAttentionCpu);
    JN_REGISTER(d, "jaxnorm_decode_attention_append", JaxnormDecodeAttentionAppendCpu);
    JN_REGISTER(d, "jaxnorm_embed_fwd", JaxnormEmbedFwdCpu);
    JN_REGISTER(d, "jaxnorm_embed_bwd", JaxnormEmbedBwdCpu);
    JN_REGISTER(d, "jaxnorm_linear_attention", JaxnormLinearAttentionCpu);
    JN_REGISTER(d, "jaxnorm_linear_attention_rank1", JaxnormLinearAttentionRank1Cpu);
    return d;
  });
}
