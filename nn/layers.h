// Convenience header: all core layers (Module, containers, Linear/Conv2d/Dropout, activations,
// pooling, init and functional helpers).
#pragma once

#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layers_extra.h"
#include "nn/linear_conv.h"
#include "nn/module.h"
#include "nn/pooling.h"
