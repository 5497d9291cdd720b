// The gloo backend's transport helpers: tensors to and from the wire (CUDA tensors staged
// through pinned memory, f16/bf16 reduced in f32 and rounded once per pair), the allreduce and
// the reduce-scatter. Internal to parallel/gloo/process_group_gloo.cpp; gloo builds
// only.
#pragma once
#if MINIDL_WITH_GLOO
#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "parallel/process_group/process_group.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace minidl::dist::gloo_wire {

// Runs fn.template operator()<T>() for the dtypes that travel on the wire: every dtype but bool
// (refused at issue time), f16/bf16 as themselves (2 bytes an element: AMP's half gradients
// are reduced in half, as NCCL does).
template <typename Fn>
void visit_wire(DType t, Fn&& fn) {
  MINIDL_CHECK(t != DType::boolean, "gloo: dtype ", t, " cannot be sent as is");
  dispatch_all(t, "gloo", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) fn.template operator()<T>();
  });
}

// A contiguous CPU tensor holding t's values (t itself when it already is one).
Tensor to_wire(const Tensor& t);

// Copies the wire buffer back into t (nothing when it is t).
void from_wire(Tensor& t, const Tensor& wire);

// wire:[n] reduced in place across ctx's ranks (op avg: sum, then divided by the size).
void allreduce_wire(const std::shared_ptr<gloo::Context>& ctx, Tensor& wire, ReduceOp op,
                    uint32_t tag, std::chrono::milliseconds timeout);

// in:[size*n] (piece r for rank r) reduced over ctx's ranks into out:[n], this rank's piece
// (an alltoall, then the reduction locally; op avg: sum, then divided by the size).
void reduce_scatter_wire(const std::shared_ptr<gloo::Context>& ctx, const Tensor& in, Tensor& out,
                         ReduceOp op, uint32_t tag, std::chrono::milliseconds timeout);

}  // namespace minidl::dist::gloo_wire
#endif  // MINIDL_WITH_GLOO
