// Autocast's settings and its weight cast cache (autocast_cache.cpp): per outermost region of
// a thread, the 16-bit casts of its f32 leaf weights; the casts the last region used, made
// again in one foreach_copy_ on entry, or taken from the copies a fused optimizer wrote.
// Included by autograd/autocast.h (the public header); weight_cache:: is for autocast.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace minidl::amp {

// The autocast settings of one device type.
struct DeviceAutocast {
  bool enabled = false;
  DType dtype = kBFloat16;
};

// All thread-local autocast settings: what DataParallel copies into its worker threads.
struct AutocastState {
  DeviceAutocast cpu{false, kBFloat16};
  DeviceAutocast cuda{false, kFloat16};
  bool cache_enabled = true;
};

// Counters of this thread, for tests: the casts autocast performed (Tensor::to calls), those
// of them that were leaf parameters going into the cache, and the reuses of cached casts.
struct AutocastCacheStats {
  int64_t casts = 0;
  int64_t weight_casts = 0;
  int64_t hits = 0;
  size_t cached = 0;  // entries in the cache now
};
AutocastCacheStats autocast_cache_stats();
void reset_autocast_cache_stats();
void clear_autocast_cache();  // torch.clear_autocast_cache()

// Weight copies written by an optimizer step (fused Adam/AdamW on the CPU): the 16-bit casts the
// next outermost region of this thread would make of the weights the last one used, written in
// the update's own pass instead of a copy pass on region entry. weight_copies_wanted(params):
// one new tensor per parameter the last region cast (of its autocast dtype), undefined for the
// others; empty when none is wanted (no region yet, CPU-only, the cache or either fused path
// off). provide_weight_copies(params, copies): the defined copies now hold their parameter's
// values; the next region takes each one whose parameter's version has not changed since.
std::vector<Tensor> weight_copies_wanted(const std::vector<Tensor>& params);
void provide_weight_copies(const std::vector<Tensor>& params, const std::vector<Tensor>& copies);

namespace weight_cache {

// An outermost region begins with `state` (the batched casts when autocast is on for some
// device type) or ends (the cache is dropped, the weights it cast remembered).
void enter_outermost_region(const AutocastState& state);
void leave_outermost_region();

// t cast to dtype: through the cache (an f32 leaf weight cast to the region's dtype inside a
// region), or plainly; both count in AutocastCacheStats.
Tensor weight_cast(const Tensor& t, DType dtype);
Tensor plain_cast(const Tensor& t, DType dtype);

}  // namespace weight_cache
}  // namespace minidl::amp
