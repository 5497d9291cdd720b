// minidl umbrella header: include this to get the whole public API.
#pragma once
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "nn/atomic_file.h"
#include "nn/safetensors.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
