#pragma once

#include <string>
#include <vector>

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

/// Several observers as one, nested like wrappers around each module: the
/// first sees a module entered first and its output last. The harness puts
/// its monitors first and the fault injector after them, so the monitors know
/// the module a fault throws from and check the output a fault replaced.
/// Observers are not owned.
class ObserverChain : public ModuleObserver {
 public:
  explicit ObserverChain(std::vector<ModuleObserver*> observers) : observers_(std::move(observers)) {}
  void on_enter(const std::string& name) override {
    for (auto* o : observers_) o->on_enter(name);
  }
  void on_output(const std::string& name, torch::Tensor& output) override {
    for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) (*it)->on_output(name, output);
  }

 private:
  std::vector<ModuleObserver*> observers_;
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
