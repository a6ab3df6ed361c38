#include "harness/monitors/monitors.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace dbh::harness {

Monitors::Mode monitor_mode_from_string(const std::string& s) {
  if (s == "off") return Monitors::Mode::kOff;
  if (s == "localise") return Monitors::Mode::kLocalise;
  return Monitors::Mode::kCheap;
}

int64_t current_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

Monitors::Monitors(Mode mode, EventWriter& events, double loss_spike_factor)
    : mode_(mode), events_(events), spike_factor_(loss_spike_factor) {}

void Monitors::on_enter(const std::string& name) {
  last_module_ = name;
  // Progress heartbeats: a long step still shows it is moving, module by
  // module, so the silence watchdog only fires when training truly stops.
  const double now = events_.elapsed();
  if (now - last_heartbeat_ >= 1.0) {
    last_heartbeat_ = now;
    events_.emit("heartbeat", {{"run", run_}, {"step", step_}, {"module", name}});
  }
}

nlohmann::json Monitors::stats(const torch::Tensor& t) const {
  torch::NoGradGuard no_grad;
  const auto x = t.detach().to(torch::kFloat32).flatten();
  const auto finite = torch::isfinite(x);
  const int64_t n_nan = torch::isnan(x).sum().item<int64_t>();
  const int64_t n_inf = torch::isinf(x).sum().item<int64_t>();
  nlohmann::json j;
  j["shape"] = t.sizes().vec();
  j["dtype"] = std::string(c10::toString(t.scalar_type()));
  j["numel"] = t.numel();
  j["nan"] = n_nan;
  j["inf"] = n_inf;
  const auto good = x.masked_select(finite);
  if (good.numel() > 0) {
    j["min"] = good.min().item<double>();
    j["max"] = good.max().item<double>();
    j["mean"] = good.mean().item<double>();
    j["abs_max"] = good.abs().max().item<double>();
  }
  if (n_nan + n_inf > 0) {
    const int64_t flat = (~finite).nonzero()[0][0].item<int64_t>();
    std::vector<int64_t> index(static_cast<size_t>(t.dim()), 0);
    int64_t rem = flat;
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      index[static_cast<size_t>(d)] = rem % t.size(d);
      rem /= t.size(d);
    }
    j["first_bad_index"] = index;
  }
  return j;
}

void Monitors::check(const Site& site, const torch::Tensor& t) {
  if (mode_ == Mode::kOff || !t.defined()) return;
  torch::NoGradGuard no_grad;
  if (mode_ == Mode::kCheap) {
    // One reduction, no full-size temporary: the float32 sum is non-finite
    // when any element is (or when finite values overflow it, |mean| above
    // ~1e38/numel, which is as good as divergence). Localise mode checks
    // element by element.
    sites_.push_back(site);
    flags_.push_back(torch::isfinite(t.detach().sum(torch::kFloat32)).logical_not());
    return;
  }
  const bool bad = !torch::isfinite(t.detach()).all().item<bool>();
  if (site.kind == "activation" && !bad) {
    last_good_output_ = stats(t);
    last_good_module_ = site.module;
  }
  if (!bad) return;
  nlohmann::json h = {{"run", run_},          {"step", step_},        {"check", "finite"},
                      {"kind", site.kind},    {"site", site.name},    {"module", site.module},
                      {"mode", "localise"},   {"primary", true},      {"stats", stats(t)}};
  if (site.kind == "activation" && !last_good_module_.empty()) {
    h["input_module"] = last_good_module_;
    h["input_stats"] = last_good_output_;
  }
  events_.emit("health", h);
  throw DivergedError("non-finite " + site.kind + " in " + site.name + " at step " +
                      std::to_string(step_));
}

void Monitors::on_output(const std::string& name, torch::Tensor& output) {
  check(Site{"activation", name, name}, output);
}

void Monitors::sample(const char* phase) {
  if (memory_probe_) phases_[phase] = memory_probe_();
}

void Monitors::on_forward(int64_t step, model::DbNetOutput& out) { sample("forward"); }

void Monitors::on_step_begin(int64_t step) {
  step_ = step;
  last_module_.clear();  // an error before the forward pass names no module
  phases_ = nlohmann::json::object();
  sites_.clear();
  flags_.clear();
  grads_.clear();
}

void Monitors::on_batch(int64_t step, model::Batch& b) {
  // Which samples this step trains on, so a failure can name them.
  events_.emit("batch", {{"run", run_}, {"step", step}, {"samples", b.sample_ids}});
  last_batch_ = b;
  sample("data");
  check(Site{"input", "image", ""}, b.image);
  check(Site{"label", "gt_shrink", ""}, b.targets.gt_shrink);
  check(Site{"label", "gt_shrink_mask", ""}, b.targets.gt_shrink_mask);
  check(Site{"label", "gt_thresh", ""}, b.targets.gt_thresh);
  check(Site{"label", "gt_thresh_mask", ""}, b.targets.gt_thresh_mask);
}

void Monitors::on_loss(int64_t step, model::DbLossParts& loss) {
  check(Site{"loss", "bce", ""}, loss.bce);
  check(Site{"loss", "l1", ""}, loss.l1);
  check(Site{"loss", "dice", ""}, loss.dice);
  check(Site{"loss", "total", ""}, loss.total);
}

namespace {
// "head.prob.up2.weight" → the observed module "head.prob.up2"; encoder
// parameters map to their stage ("encoder.layer3.1.conv2.weight" →
// "encoder.layer3").
std::string module_of_parameter(const std::string& param) {
  const auto dot = param.rfind('.');
  std::string m = dot == std::string::npos ? param : param.substr(0, dot);
  if (m.rfind("encoder.layer", 0) == 0) return m.substr(0, std::string("encoder.layerN").size());
  if (m.rfind("encoder.", 0) == 0) return "encoder.stem";
  if (m.rfind("decoder.fusion", 0) == 0) return "decoder.fusion";
  if (m.rfind("decoder.", 0) == 0) {
    const auto second = m.find('.', 8);
    return second == std::string::npos ? m : m.substr(0, second);
  }
  if (m.rfind("head.", 0) == 0) {
    // head.prob.bn → head.prob.conv (bn belongs to the conv stage), up1_bn → up1.
    std::string h = m;
    if (h.size() > 3 && h.compare(h.size() - 3, 3, ".bn") == 0) h = h.substr(0, h.size() - 3) + ".conv";
    if (h.size() > 7 && h.compare(h.size() - 7, 7, ".up1_bn") == 0) h = h.substr(0, h.size() - 7) + ".up1";
    return h;
  }
  return m;
}
}  // namespace

void Monitors::on_before_optimizer(int64_t step, model::DbNet& model) {
  sample("backward");
  // Gradients in backward order: parameters closest to the output first.
  auto params = model->named_parameters(/*recurse=*/true);
  for (auto it = params.end(); it != params.begin();) {
    --it;
    const auto& g = it->value().grad();
    if (!g.defined()) continue;
    if (mode_ == Mode::kCheap) {
      grads_.emplace_back(it->key(), g);  // checked through their norms
    } else {
      check(Site{"gradient", it->key(), module_of_parameter(it->key())}, g);
    }
  }
}

void Monitors::on_grad_norms(int64_t step, const torch::Tensor& norms) {
  if (mode_ != Mode::kCheap) return;
  if (norms.defined() && norms.numel() > 0) {
    torch::NoGradGuard no_grad;
    sites_.push_back(Site{"gradients", "", ""});  // expanded in flush when flagged
    flags_.push_back(torch::isfinite(norms).all().logical_not());
  }
  flush(step);
}

void Monitors::flush(int64_t step) {
  if (flags_.empty()) return;
  const auto flags = torch::stack(flags_).to(torch::kCPU);  // the one sync per step
  const bool* f = flags.data_ptr<bool>();
  std::vector<Site> bad;
  for (size_t i = 0; i < sites_.size(); ++i) {
    if (!f[i]) continue;
    if (sites_[i].kind != "gradients") {
      bad.push_back(sites_[i]);
      continue;
    }
    // A non-finite norm: find the gradients themselves (none when a finite
    // gradient's norm merely overflowed).
    torch::NoGradGuard no_grad;
    for (const auto& [name, g] : grads_) {
      if (!torch::isfinite(g).all().item<bool>()) bad.push_back(Site{"gradient", name, module_of_parameter(name)});
    }
  }
  if (bad.empty()) return;
  // The first site in execution order is the primary finding; later ones are
  // consequences, reported as a count per kind.
  const Site first = bad.front();
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& b : bad) counts[b.kind] = counts.value(b.kind, 0) + 1;
  events_.emit("health", {{"run", run_},
                          {"step", step},
                          {"check", "finite"},
                          {"kind", first.kind},
                          {"site", first.name},
                          {"module", first.module},
                          {"mode", "cheap"},
                          {"primary", true},
                          {"nonfinite_sites", counts}});
  throw DivergedError("non-finite " + first.kind + " in " + first.name + " at step " +
                      std::to_string(step));
}

void Monitors::on_step_end(int64_t step, const model::StepResult& r) {
  sample("optimizer");
  if (spike_factor_ > 0 && losses_.size() >= 3 && std::isfinite(r.loss)) {
    std::vector<double> sorted = losses_;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (median > 0 && r.loss > spike_factor_ * median) {
      events_.emit("health", {{"run", run_},
                              {"step", step},
                              {"check", "loss_spike"},
                              {"kind", "loss"},
                              {"site", "total"},
                              {"loss", r.loss},
                              {"median", median},
                              {"factor", r.loss / median}});
    }
  }
  if (std::isfinite(r.loss)) losses_.push_back(r.loss);
}

}  // namespace dbh::harness
