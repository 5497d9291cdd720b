// Convenience header for the extra layers: Identity, LeakyReLU, PReLU, Hardswish, GroupNorm,
// Upsample and the functionals leaky_relu, prelu, hardswish, group_norm, interpolate, pad.
#pragma once

#include "nn/activation_extra.h"
#include "nn/group_norm.h"
#include "nn/padding.h"
#include "nn/upsample.h"
