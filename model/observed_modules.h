#pragma once
// The modules a DbNet forward pass reports to the module observer
// (nn/hooks.h, run_module), declared without LibTorch so that scenarios are
// checked against the model's own names: a fault's `module`, a monitor's
// finding, a bisection's answer. tests/unit/model/model_test.cc runs a
// training forward pass of each decoder and compares what it reports with
// this list.

#include <string>
#include <vector>

#include "model/choices.h"

namespace dbh::model {

/// The observed modules of a training forward pass with decoder `decoder`,
/// in the order they run: the encoder's stem and stages,
/// the decoder's blocks, the head's branches and the binarization.
const std::vector<std::string>& observed_modules(DecoderKind decoder);

/// The observed modules that own parameters (all but head.binarize,
/// sigmoid(k(P - T))): where a gradient fault can act.
const std::vector<std::string>& observed_modules_with_parameters(DecoderKind decoder);

}  // namespace dbh::model
