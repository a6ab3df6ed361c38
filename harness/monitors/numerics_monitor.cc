#include "harness/monitors/numerics_monitor.h"

#include <algorithm>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>

#include "model/dbnet.h"

namespace dbh::harness::monitors {

namespace {

// The entry of `name` in `list`, appended when there is none.
torch::Tensor& entry(std::vector<std::pair<std::string, torch::Tensor>>& list, const std::string& name) {
  const auto it = std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  if (it != list.end()) return it->second;
  list.emplace_back(name, torch::Tensor());
  return list.back().second;
}

}  // namespace

NumericsMonitor::NumericsMonitor(double jitter, int64_t trial)
    : jitter_(trial > 0 ? jitter : 0),
      generator_(at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(trial < 0 ? 0 : trial))) {}

void NumericsMonitor::on_output(const std::string& name, torch::Tensor& output) {
  if (!output.defined() || output.numel() == 0 || !output.is_floating_point()) return;
  const torch::Tensor mean_abs = output.detach().abs().mean(torch::kFloat32);
  if (jitter_ != 0 && torch::GradMode::is_enabled()) {
    torch::Tensor noise;
    {
      torch::NoGradGuard no_grad;
      noise = at::randn(output.sizes(), generator_, torch::dtype(torch::kFloat32))
                  .to(output.device())
                  .mul_(mean_abs * jitter_)
                  .to(output.scalar_type());
    }
    output = output + noise;  // a constant to autograd: the gradient flows through unchanged
  }
  entry(acts_, name) = mean_abs;
}

void NumericsMonitor::on_step_begin(int64_t) {
  acts_.clear();
  grads_.clear();
}

void NumericsMonitor::on_before_optimizer(int64_t, model::DbNet& model) {
  torch::NoGradGuard no_grad;
  for (const auto& p : model->named_parameters(/*recurse=*/true)) {
    const auto& g = p.value().grad();
    if (!g.defined()) continue;
    torch::Tensor& sum = entry(grads_, model::observed_module_of(p.key()));
    const torch::Tensor sq = g.detach().to(torch::kFloat32).pow(2).sum();
    sum = sum.defined() ? sum + sq : sq;
  }
}

void NumericsMonitor::on_step_end(int64_t, const model::StepResult&) {
  numbers_.clear();
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : acts_) parts.push_back(t.reshape({1}));
  for (const auto& [name, t] : grads_) parts.push_back(t.reshape({1}));
  if (parts.empty()) return;
  const auto host = torch::cat(parts).to(torch::kCPU, torch::kFloat64).contiguous();  // the one read
  const double* v = host.data_ptr<double>();
  const auto finite = [](double x) { return std::isfinite(x) ? std::optional<double>(x) : std::nullopt; };
  for (size_t i = 0; i < acts_.size(); ++i) numbers_.push_back({acts_[i].first, finite(v[i]), std::nullopt});
  for (size_t i = 0; i < grads_.size(); ++i) {
    const double norm = std::sqrt(v[acts_.size() + i]);
    auto it = std::find_if(numbers_.begin(), numbers_.end(), [&](const auto& n) { return n.module == grads_[i].first; });
    if (it == numbers_.end()) it = numbers_.insert(numbers_.end(), proto::ModuleNumbers{grads_[i].first, {}, {}});
    it->grad = finite(norm);
  }
  acts_.clear();
  grads_.clear();
}

}  // namespace dbh::harness::monitors
