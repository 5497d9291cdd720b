// Parameter initialisers (torch.nn.init): fill tensors in place under NoGradGuard, optionally
// drawing from a given Generator (nullptr: minidl's default generator).
#pragma once

#include <string_view>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace minidl::nn::init {

// torch.nn.init.calculate_gain: linear/conv*/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2/(1+param^2)) (param default 0.01), selu 3/4.
double calculate_gain(std::string_view nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a tensor with >= 2 dims: [out, in, *receptive] layout.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double a = 0, double b = 1, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& xavier_uniform_(Tensor& t, double gain = 1, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1, Generator* gen = nullptr);
// mode: "fan_in" | "fan_out"; nonlinearity as in calculate_gain (a = leaky_relu slope).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, std::string_view mode = "fan_in",
                         std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);

}  // namespace minidl::nn::init
