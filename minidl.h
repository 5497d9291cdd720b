// minidl umbrella header: include this to get the whole public API.
#pragma once
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
