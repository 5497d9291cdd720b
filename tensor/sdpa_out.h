// scaled_dot_product_attention's forward writing into a caller-provided output (torch's `out=`
// convention), e.g. a [B,nh,T,hd] view of a [B,T,C] tensor; tensor/ops/attention.cpp.
#pragma once
#include "tensor/ops.h"

namespace minidl::native {

// As scaled_dot_product_attention_forward, with out:[..., L, Ev] of q's dtype and device, any
// strides with unit stride in the last dim when it is 3-D or 4-D (else contiguous); returned
// as result.out. lse is allocated as there.
SdpaForwardResult scaled_dot_product_attention_forward_out(const Tensor& q, const Tensor& k,
                                                           const Tensor& v, const SdpaParams& p,
                                                           const Tensor& out);

}  // namespace minidl::native
