#pragma once

#include <torch/torch.h>

namespace dbh::model {

/// Observes the named modules of a forward pass. The harness installs one to
/// check outputs (monitors), to replace them (fault injection) and to know
/// the last module entered when an error is raised. Names are the stable
/// module names ("encoder.layer3", "decoder.fusion", "head.prob.up2").
class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  /// Called before the module runs. May throw (an injected error).
  virtual void on_enter(const std::string& name) {}
  /// Called with the module's output; may replace it.
  virtual void on_output(const std::string& name, torch::Tensor& output) {}
};

/// Installs `observer` for the process (nullptr removes it). Not owned.
void set_module_observer(ModuleObserver* observer);
ModuleObserver* module_observer();

/// Runs `fn` as module `name`: notifies the observer before and after, and
/// returns the (possibly replaced) output. Costs one pointer test without an
/// observer.
template <typename Fn>
torch::Tensor run_module(const std::string& name, Fn&& fn) {
  ModuleObserver* obs = module_observer();
  if (obs == nullptr) return fn();
  obs->on_enter(name);
  torch::Tensor out = fn();
  obs->on_output(name, out);
  return out;
}

}  // namespace dbh::model
