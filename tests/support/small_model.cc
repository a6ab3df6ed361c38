#include "tests/support/small_model.h"

#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace dbh::testing {

namespace {

class OneIntraOpThread : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};

[[maybe_unused]] ::testing::Environment* const kOneIntraOpThread =
    ::testing::AddGlobalTestEnvironment(new OneIntraOpThread);

}  // namespace

model::DbNet& shared_dbnet() {
  static model::DbNet net = [] {
    torch::manual_seed(1);
    return model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18)));
  }();
  return net;
}

void fill_gradients(model::DbNet& net, float value) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) {
    auto& g = p.mutable_grad();
    if (g.defined() && g.sizes() == p.sizes()) {
      g.fill_(value);
    } else {
      g = torch::full_like(p, value);
    }
  }
}

void set_gradient(model::DbNet& net, const std::string& parameter, float value) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->named_parameters(/*recurse=*/true)) {
    if (p.key() != parameter) continue;
    p.value().mutable_grad() = torch::full_like(p.value(), value);
    return;
  }
  throw std::invalid_argument("no parameter named \"" + parameter + "\" in the DBNet");
}

void clear_gradients(model::DbNet& net) {
  for (auto& p : net->parameters())
    p.mutable_grad() = torch::Tensor();
}

torch::Tensor gradient_norms(model::DbNet& net) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : net->parameters()) {
    if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(torch::kFloat32));
  }
  return norms.empty() ? torch::Tensor() : torch::stack(norms);
}

}  // namespace dbh::testing
