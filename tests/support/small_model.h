#pragma once

#include <string>

#include <torch/torch.h>

#include "model/dbnet.h"

namespace dbh::testing {

// Torch helpers for tests on small tensors. Linking small_model.cc also runs
// the whole test program on one intra-op thread: on tensors this small,
// OpenMP threads only wait for each other, and on a busy machine (two cores
// shared with other builds) a step took 10 to 40 times longer with two.

/// One ResNet-18 + FPN DBNet (seeded) for the whole test program, for the
/// hooks that take a model (gradients, the binarization switch): building one
/// costs a few hundred milliseconds. A test that changes it restores it
/// (clear_gradients, the default sigmoid binarization).
model::DbNet& shared_dbnet();

/// Sets the gradient of every parameter of `net` to `value` (full size; in
/// place when it is defined already).
void fill_gradients(model::DbNet& net, float value);
/// Defines the gradient of the parameter named `parameter` as `value`
/// (full size); throws std::invalid_argument for an unknown name.
void set_gradient(model::DbNet& net, const std::string& parameter, float value);
/// Undefines every gradient of `net`, as zero_grad(set_to_none) does.
void clear_gradients(model::DbNet& net);
/// What model::Trainer hands to TrainerListener::on_grad_norms: [P] float32,
/// the L2 norm of every defined gradient in parameters() order; undefined
/// when no gradient is.
torch::Tensor gradient_norms(model::DbNet& net);

}  // namespace dbh::testing
