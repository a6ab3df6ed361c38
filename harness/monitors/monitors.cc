#include "harness/monitors/monitors.h"

#include "harness/common/json_fields.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "model/eval/overlay.h"

namespace dbh::harness::monitors {

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

Monitors::Monitors(Mode mode, proto::EventWriter& events, double loss_spike_factor, SilentOptions silent)
    : mode_(mode), events_(events), spike_factor_(loss_spike_factor), silent_(silent), judge_(silent) {}

std::string Monitors::to_string(SiteKind kind) {
  switch (kind) {
    case SiteKind::kInput: return "input";
    case SiteKind::kLabel: return "label";
    case SiteKind::kActivation: return "activation";
    case SiteKind::kLoss: return "loss";
    case SiteKind::kGradient:
    case SiteKind::kAllGradients: return "gradient";
  }
  return "gradient";
}

void Monitors::on_enter(const std::string& name) {
  last_module_ = name;
  // Progress heartbeats: a long step still shows it is moving, module by
  // module, so the silence watchdog only fires when training truly stops.
  const double now = events_.elapsed();
  if (now - last_heartbeat_ >= 1.0) {
    last_heartbeat_ = now;
    events_.emit(proto::Heartbeat{run_, step_, name});
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

proto::Health Monitors::finite_failure(const Site& site, int64_t step, const char* mode) const {
  proto::Health h;
  h.run = run_;
  h.step = step;
  h.check = "finite";
  h.kind = to_string(site.kind);
  h.site = site.name;
  h.module = site.module;
  h.mode = mode;
  h.primary = true;
  return h;
}

void Monitors::check(const Site& site, const torch::Tensor& t) {
  if (mode_ == Mode::kOff || !t.defined()) return;
  torch::NoGradGuard no_grad;
  if (mode_ == Mode::kCheap) {
    // One reduction, no full-size temporary: the float32 sum is non-finite
    // when any element is (or when finite values overflow it, |mean| above
    // ~1e38/numel, which is as good as divergence). flush() tests every
    // site's sum at once. Localise mode checks element by element.
    sites_.push_back(site);
    sums_.push_back(t.detach().sum(torch::kFloat32));
    return;
  }
  const bool bad = !torch::isfinite(t.detach()).all().item<bool>();
  if (site.kind == SiteKind::kActivation && !bad) {
    last_good_output_ = stats(t);
    last_good_module_ = site.module;
  }
  if (!bad) return;
  proto::Health h = finite_failure(site, step_, "localise");
  h.stats = stats(t);
  if (site.kind == SiteKind::kActivation && !last_good_module_.empty()) {
    h.extra["input_module"] = last_good_module_;
    h.extra["input_stats"] = last_good_output_;
  }
  events_.emit(h);
  throw DivergedError("non-finite " + to_string(site.kind) + " in " + site.name + " at step " +
                      std::to_string(step_));
}

void Monitors::on_output(const std::string& name, torch::Tensor& output) {
  check(Site{SiteKind::kActivation, name, name}, output);
}

void Monitors::sample(const char* phase) {
  if (memory_probe_) phases_[phase] = memory_probe_();
}

void Monitors::on_forward(int64_t step, model::DbNetOutput& out) {
  sample("forward");
  if (silent_on() && silent_.predictions && out.probability.defined() && out.probability.numel() > 0) {
    torch::NoGradGuard no_grad;
    const auto p = out.probability.detach().to(torch::kFloat32);
    const auto [lo, hi] = torch::aminmax(p);
    silent_probs_.push_back(torch::stack({lo, hi, p.mean()}));
  }
}

void Monitors::on_step_begin(int64_t step) {
  step_ = step;
  last_module_.clear();  // an error before the forward pass names no module
  clear_last_good();
  phases_ = nlohmann::json::object();
  sites_.clear();
  sums_.clear();
  grads_.clear();
  silent_input_.clear();
  silent_labels_.clear();
  silent_probs_.clear();
  words_.clear();
  ids_.clear();
  judge_.clear_stats();
}

void Monitors::clear_last_good() {
  // The first module of a forward pass has the batch as input, never the
  // output of the previous pass's last module.
  last_good_module_.clear();
  last_good_output_ = nlohmann::json();
}

void Monitors::on_batch(int64_t step, model::Batch& b) {
  clear_last_good();
  // Which samples this step trains on, so a failure can name them.
  events_.emit(proto::BatchSamples{run_, step, b.sample_ids});
  last_batch_ = b;
  sample("data");
  check(Site{SiteKind::kInput, "image", ""}, b.image);
  check(Site{SiteKind::kLabel, "gt_shrink", ""}, b.targets.gt_shrink);
  check(Site{SiteKind::kLabel, "gt_shrink_mask", ""}, b.targets.gt_shrink_mask);
  check(Site{SiteKind::kLabel, "gt_thresh", ""}, b.targets.gt_thresh);
  check(Site{SiteKind::kLabel, "gt_thresh_mask", ""}, b.targets.gt_thresh_mask);
  if (!silent_on() || !b.image.defined() || !b.targets.gt_shrink.defined()) return;
  // Note [Silent-failure monitors]: reductions only, read with the flags.
  torch::NoGradGuard no_grad;
  const int64_t n = b.size();
  if (silent_.input && b.image.dim() == 4 && b.image.size(1) == 3) {
    const auto x = b.image.detach().to(torch::kFloat32).flatten(2);  // [N, 3, H·W], a view when contiguous
    const auto [lo, hi] = torch::aminmax(x, 2);
    silent_input_.push_back(torch::stack({x.mean(2), lo, hi}));  // [3, N, 3]
  }
  const auto shrink = b.targets.gt_shrink.detach().to(torch::kFloat32);
  const auto g = shrink.reshape({n, 1, -1});
  const auto m = b.targets.gt_shrink_mask.detach().to(torch::kFloat32).reshape({n, -1, 1});
  const auto positives = g.sum({1, 2});
  // Kernel pixels inside the annotated word boxes (dilated by a pixel of
  // rounding): trace(R·G·Cᵀ) per sample, R [N, B, H] and C [N, B, W] the
  // boxes' row and column indicators. Boxes that overlap count a pixel twice,
  // which can only lower the share found outside. Unknown boxes: all inside.
  torch::Tensor in_boxes = positives;
  if (b.word_boxes.defined() && b.word_boxes.dim() == 3 && b.word_boxes.size(0) == n && b.word_boxes.size(1) > 0 &&
      shrink.dim() == 4) {
    const auto boxes = b.word_boxes.to(shrink.device(), torch::kFloat32);
    const auto opts = shrink.options();
    const auto ys = torch::arange(shrink.size(2), opts).view({1, 1, -1});
    const auto xs = torch::arange(shrink.size(3), opts).view({1, 1, -1});
    const auto col = [&](int64_t k) { return boxes.select(2, k).unsqueeze(2); };  // [N, B, 1]
    const auto rows = (ys >= col(1) - 1).logical_and(ys <= col(3) + 1).to(torch::kFloat32);
    const auto cols = (xs >= col(0) - 1).logical_and(xs <= col(2) + 1).to(torch::kFloat32);
    const auto gc = torch::bmm(shrink.reshape({n, shrink.size(2), shrink.size(3)}), cols.transpose(1, 2));  // [N, H, B]
    in_boxes = (rows * gc.transpose(1, 2)).sum({1, 2});
  }
  silent_labels_.push_back(torch::stack({torch::bmm(g, m).reshape({n}), positives, in_boxes}));  // [3, N]
  for (int64_t k = 0; k < n; ++k) {
    const auto i = static_cast<size_t>(k);
    words_.push_back(i < b.words.size() ? b.words[i] : -1);
    ids_.push_back(i < b.sample_ids.size() ? b.sample_ids[i] : "sample " + std::to_string(k));
  }
}

void Monitors::on_loss(int64_t step, model::DbLossParts& loss) {
  check(Site{SiteKind::kLoss, "bce", ""}, loss.bce);
  check(Site{SiteKind::kLoss, "l1", ""}, loss.l1);
  check(Site{SiteKind::kLoss, "dice", ""}, loss.dice);
  check(Site{SiteKind::kLoss, "total", ""}, loss.total);
}


void Monitors::on_before_optimizer(int64_t step, model::DbNet& model) {
  sample("backward");
  // Gradients in backward order: parameters closest to the output first.
  auto params = model->named_parameters(/*recurse=*/true);
  for (auto it = params.end(); it != params.begin();) {
    --it;
    const auto& g = it->value().grad();
    if (!g.defined()) continue;
    if (mode_ == Mode::kCheap || scaler_) {
      grads_.emplace_back(it->key(), g);  // checked through their norms
    } else {
      check(Site{SiteKind::kGradient, it->key(), model::observed_module_of(it->key())}, g);
    }
  }
}

void Monitors::on_grad_norms(int64_t step, const torch::Tensor& norms) {
  if (mode_ == Mode::kLocalise) {
    if (scaler_ && norms.defined() && norms.numel() > 0) {
      // Gradients are judged after the scaler's verdict, as in cheap mode.
      torch::NoGradGuard no_grad;
      sites_.push_back(Site{SiteKind::kAllGradients, "", ""});
      sums_.push_back(norms.sum(torch::kFloat32));
      flush(step);
    }
    // Localise mode synchronises anyway; the silent reductions get one read.
    const auto parts = silent_parts();
    if (!parts.empty()) {
      const auto host = torch::cat(parts).to(torch::kCPU).contiguous();
      judge_silent(step, host.data_ptr<float>());
    }
    return;
  }
  if (mode_ != Mode::kCheap) return;
  if (norms.defined() && norms.numel() > 0) {
    torch::NoGradGuard no_grad;
    // The norms' sum is non-finite when a norm is (or when finite norms
    // overflow it: flush() then finds no gradient to blame).
    sites_.push_back(Site{SiteKind::kAllGradients, "", ""});  // expanded in flush when flagged
    sums_.push_back(norms.sum(torch::kFloat32));
  }
  flush(step);
}

void Monitors::flush(int64_t step) {
  // The finite flags and the silent reductions travel in one copy.
  std::vector<torch::Tensor> parts;
  if (!sums_.empty()) parts.push_back(torch::isfinite(torch::stack(sums_)).logical_not().to(torch::kFloat32));
  const auto silent = silent_parts();
  parts.insert(parts.end(), silent.begin(), silent.end());
  if (parts.empty()) return;
  const auto host = torch::cat(parts).to(torch::kCPU).contiguous();  // the one sync per step
  const float* f = host.data_ptr<float>();
  std::vector<Site> bad;
  for (size_t i = 0; i < sites_.size(); ++i) {
    if (f[i] == 0.0f) continue;
    if (sites_[i].kind != SiteKind::kAllGradients) {
      bad.push_back(sites_[i]);
      continue;
    }
    // A non-finite norm: find the gradients themselves (none when a finite
    // gradient's norm merely overflowed).
    torch::NoGradGuard no_grad;
    for (const auto& [name, g] : grads_) {
      if (!torch::isfinite(g).all().item<bool>()) bad.push_back(Site{SiteKind::kGradient, name, model::observed_module_of(name)});
    }
  }
  if (!bad.empty() && scaler_ && std::all_of(bad.begin(), bad.end(), [](const Site& b) { return b.kind == SiteKind::kGradient; })) {
    // Note [Loss-scaler skips]: with fp16 a dynamic loss scaler multiplies the
    // loss by up to 2^16 and skips the optimizer step when the gradients
    // overflow, halving the scale; a few skips (at the start, or after a
    // spike) are its normal work, as PyTorch's GradScaler does. Gradients that
    // stay non-finite whatever the scale (NaN from the backward, seed 002 in
    // fp16) make it skip every step and the run learns nothing: that is the
    // failure, reported at the first step of the streak.
    if (skip_streak_ == 0) {
      skip_streak_start_ = step;
      skip_streak_first_ = {{"site", bad.front().name}, {"module", bad.front().module}};
    }
    ++skip_streak_;
    proto::Health skip;
    skip.run = run_;
    skip.step = step;
    skip.check = "loss_scaler";
    skip.kind = "gradient";
    skip.site = bad.front().name;
    skip.module = bad.front().module;
    skip.primary = false;
    skip.extra = {{"skipped_in_a_row", skip_streak_}, {"limit", scaler_skip_limit_}};
    events_.emit(skip);
    if (skip_streak_ < scaler_skip_limit_) {
      if (!silent.empty()) judge_silent(step, f + sums_.size());
      return;
    }
    const std::string site = field_or(skip_streak_first_, "site", "");
    proto::Health h;
    h.run = run_;
    h.step = skip_streak_start_;
    h.check = "finite";
    h.kind = "gradient";
    h.site = site;
    h.module = field_or(skip_streak_first_, "module", "");
    h.mode = mode_ == Mode::kCheap ? "cheap" : "localise";
    h.primary = true;
    h.nonfinite_sites = {{"gradient", bad.size()}};
    h.extra = {{"loss_scaler_skips", skip_streak_}};
    events_.emit(h);
    throw DivergedError("non-finite gradient in " + site + " from step " + std::to_string(skip_streak_start_) +
                        ": the loss scaler skipped " + std::to_string(skip_streak_) +
                        " steps in a row (the gradients stay non-finite at every scale)");
  }
  if (bad.empty()) skip_streak_ = 0;
  if (bad.empty()) {
    if (!silent.empty()) judge_silent(step, f + sums_.size());
    return;
  }
  // The first site in execution order is the primary finding; later ones are
  // consequences, reported as a count per kind.
  const Site first = bad.front();
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& b : bad) counts[to_string(b.kind)] = field_or(counts, to_string(b.kind), 0) + 1;
  proto::Health h = finite_failure(first, step, "cheap");
  h.nonfinite_sites = counts;
  events_.emit(h);
  throw DivergedError("non-finite " + to_string(first.kind) + " in " + first.name + " at step " +
                      std::to_string(step));
}

std::vector<torch::Tensor> Monitors::silent_parts() const {
  std::vector<torch::Tensor> parts;
  if (!silent_on()) return parts;
  for (const auto* group : {&silent_input_, &silent_labels_, &silent_probs_}) {
    for (const auto& t : *group)
      parts.push_back(t.reshape({-1}));
  }
  return parts;
}

void Monitors::silent_failure(int64_t step, SilentFinding finding) {
  proto::Health h;
  h.run = run_;
  h.step = step;
  h.check = finding.check;
  h.kind = finding.kind;
  h.site = finding.site;
  h.module = "";
  h.mode = mode_ == Mode::kLocalise ? "localise" : "cheap";
  h.primary = true;
  h.message = finding.message;
  h.evidence = std::move(finding.evidence);
  if (finding.detail.is_object()) h.extra = std::move(finding.detail);
  events_.emit(h);
  throw SilentFailureError(finding.message);
}

void Monitors::judge_silent(int64_t step, const float* v) {
  SilentReadings r;
  // Input: per image, de-normalised to 0-255 per channel (affine, so mean,
  // minimum and maximum carry over exactly, without the clamping a picture
  // gets: values beyond white show a missing normalisation).
  size_t off = 0;
  for (const auto& t : silent_input_) {
    const int64_t n = t.size(1);
    for (int64_t k = 0; k < n; ++k) {
      SilentReadings::Image im;
      for (int c = 0; c < 3; ++c) {
        const auto at = [&](int q) { return static_cast<double>(v[off + static_cast<size_t>((q * n + k) * 3 + c)]); };
        const double scale = 255.0 * model::kImageNetStd[c], shift = 255.0 * model::kImageNetMean[c];
        im.mean += (at(0) * scale + shift) / 3.0;
        im.min = std::min(im.min, at(1) * scale + shift);
        im.max = std::max(im.max, at(2) * scale + shift);
      }
      r.images.push_back(im);
    }
    off += static_cast<size_t>(t.numel());
  }
  for (const auto& t : silent_labels_) {
    const int64_t n = t.size(1);
    for (int64_t k = 0; k < n; ++k) {
      r.inside.push_back(v[off + static_cast<size_t>(k)]);
      r.positives.push_back(v[off + static_cast<size_t>(n + k)]);
      r.in_boxes.push_back(v[off + static_cast<size_t>(2 * n + k)]);
    }
    off += static_cast<size_t>(t.numel());
  }
  r.has_probabilities = !silent_probs_.empty();
  for (size_t k = 0; k < silent_probs_.size(); ++k, off += 3) {
    r.prob_min = std::min<double>(r.prob_min, v[off]);
    r.prob_max = std::max<double>(r.prob_max, v[off + 1]);
    r.prob_mean += v[off + 2] / static_cast<double>(silent_probs_.size());
  }
  r.words = words_;
  r.ids = ids_;
  if (auto finding = judge_.judge(step, r)) silent_failure(step, std::move(*finding));
}

void Monitors::on_step_end(int64_t step, const model::StepResult& r) {
  sample("optimizer");
  if (spike_factor_ > 0 && losses_.size() >= 3 && std::isfinite(r.loss)) {
    const double median = losses_.median();  // of every earlier step's loss
    if (median > 0 && r.loss > spike_factor_ * median) {
      proto::Health h;
      h.run = run_;
      h.step = step;
      h.check = "loss_spike";
      h.kind = "loss";
      h.site = "total";
      h.extra = {{"loss", r.loss}, {"median", median}, {"factor", r.loss / median}};
      events_.emit(h);
    }
  }
  if (std::isfinite(r.loss)) losses_.add(r.loss);
}

}  // namespace dbh::harness::monitors
