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

/// The observed module (the name a forward pass reports to the module
/// observer, model/nn/hooks.h) that owns parameter `parameter`:
/// "head.prob.up2.weight" → "head.prob.up2"; encoder parameters map to their
/// stage ("encoder.layer3.1.conv2.weight" → "encoder.layer3", "encoder.conv1.weight"
/// → "encoder.stem"); a head's batch norm to its conv ("head.prob.bn.weight" →
/// "head.prob.conv"); PAN's stride-2 convolutions to the merge they run in
/// ("decoder.down3.conv.weight" → "decoder.merge4"). Every answer is one of
/// observed_modules_with_parameters() (model/observed_modules.h).
std::string observed_module_of(const std::string& parameter);

/// Whether `parameter` reads as one of the model's parameter names with
/// decoder `decoder`: a weight or a bias whose observed module
/// (observed_module_of) is one that owns parameters. Every name of
/// named_parameters() passes (tests/unit/model/model_test.cc), so a scenario's
/// `nan_gradient.parameter` is checked before training against the names the
/// model itself gives ("head.prob.bn.weight" belongs to "head.prob.conv").
bool is_parameter_name(DecoderKind decoder, const std::string& parameter);

}  // namespace dbh::model
