#include "harness/monitors/monitors.h"

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
    : mode_(mode), events_(events), spike_factor_(loss_spike_factor), silent_(silent) {}

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
  silent_stats_ = nlohmann::json::object();
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
  events_.emit(proto::Batch{run_, step, b.sample_ids});
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
    const std::string site = skip_streak_first_.value("site", "");
    proto::Health h;
    h.run = run_;
    h.step = skip_streak_start_;
    h.check = "finite";
    h.kind = "gradient";
    h.site = site;
    h.module = skip_streak_first_.value("module", "");
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
  for (const auto& b : bad) counts[to_string(b.kind)] = counts.value(to_string(b.kind), 0) + 1;
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

namespace {

// `v` with `digits` decimals; no "-0.000" for a value that rounds to 0.
std::string fixed(double v, int digits) {
  if (std::fabs(v) < 0.5 * std::pow(10.0, -digits)) v = 0.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string step_range(int64_t from, int64_t to) {
  return from == to ? "step " + std::to_string(from) : "steps " + std::to_string(from) + "–" + std::to_string(to);
}

}  // namespace

void Monitors::silent_failure(int64_t step, const std::string& check, const std::string& kind, const std::string& site,
                              const std::string& message, const std::vector<std::string>& evidence,
                              nlohmann::json detail) {
  proto::Health h;
  h.run = run_;
  h.step = step;
  h.check = check;
  h.kind = kind;
  h.site = site;
  h.module = "";
  h.mode = mode_ == Mode::kLocalise ? "localise" : "cheap";
  h.primary = true;
  h.message = message;
  h.evidence = evidence;
  if (detail.is_object()) h.extra = std::move(detail);
  events_.emit(h);
  throw SilentFailureError(message);
}

// One step's silent-failure readings, unpacked from the values read back in
// one transfer (Monitors::judge_silent).
struct SilentReadings {
  struct Image {
    double mean = 0, min = INFINITY, max = -INFINITY;  // de-normalised to 0-255
  };
  std::vector<Image> images;
  // Per sample: kernel pixels inside the training mask, in all, in word boxes.
  std::vector<double> inside, positives, in_boxes;
  double prob_min = INFINITY, prob_max = -INFINITY, prob_mean = 0;  // over the probability maps
  double text_pixels = 0;  // kernel pixels inside the training mask, the batch's
};

void Monitors::judge_silent(int64_t step, const float* v) {
  SilentReadings r;
  // Input: per image, de-normalised to 0-255 per channel (affine, so mean,
  // minimum and maximum carry over exactly, without the clamping a picture
  // gets: values beyond white show a missing normalisation).
  auto& images = r.images;
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
      images.push_back(im);
    }
    off += static_cast<size_t>(t.numel());
  }
  auto& inside = r.inside;
  auto& positives = r.positives;
  auto& in_boxes = r.in_boxes;
  for (const auto& t : silent_labels_) {
    const int64_t n = t.size(1);
    for (int64_t k = 0; k < n; ++k) {
      inside.push_back(v[off + static_cast<size_t>(k)]);
      positives.push_back(v[off + static_cast<size_t>(n + k)]);
      in_boxes.push_back(v[off + static_cast<size_t>(2 * n + k)]);
    }
    off += static_cast<size_t>(t.numel());
  }
  double& prob_min = r.prob_min;
  double& prob_max = r.prob_max;
  double& prob_mean = r.prob_mean;
  for (size_t k = 0; k < silent_probs_.size(); ++k, off += 3) {
    prob_min = std::min<double>(prob_min, v[off]);
    prob_max = std::max<double>(prob_max, v[off + 1]);
    prob_mean += v[off + 2] / static_cast<double>(silent_probs_.size());
  }
  double& text_pixels = r.text_pixels;
  for (double x : inside)
    text_pixels += x;

  silent_stats_ = nlohmann::json::object();
  if (!images.empty()) {
    double mean = 0, lo = INFINITY, hi = -INFINITY;
    for (const auto& im : images) {
      mean += im.mean / static_cast<double>(images.size());
      lo = std::min(lo, im.min);
      hi = std::max(hi, im.max);
    }
    silent_stats_["input_mean"] = mean;
    silent_stats_["input_min"] = lo;
    silent_stats_["input_max"] = hi;
  }
  silent_stats_["text_pixels"] = text_pixels;
  if (!silent_probs_.empty()) {
    silent_stats_["prob_mean"] = prob_mean;
    silent_stats_["prob_min"] = prob_min;
    silent_stats_["prob_max"] = prob_max;
  }
  judge_silent_input(step, r);
  judge_silent_labels(step, r);
  judge_silent_predictions(step, r);
}

void Monitors::judge_silent_input(int64_t step, const SilentReadings& r) {
  const auto& images = r.images;
  const auto name = [&](size_t k) { return k < ids_.size() ? ids_[k] : "sample " + std::to_string(k); };
  // 1. Input black or saturated: the thresholds of model::looks_all_black
  // (mean below 2, maximum below 10), and their mirror at white; a mean
  // above white (260) is impossible for pixels normalised from [0, 1].
  if (silent_.input && !images.empty()) {
    size_t black = 0, saturated = 0, raw = 0;
    for (const auto& im : images) {
      if (im.mean < 2.0 && im.max < 10.0) {
        ++black;
      } else if ((im.mean > 253.0 && im.min > 245.0) || im.mean > 260.0) {
        ++saturated;
        if (im.mean > 260.0) ++raw;
      }
    }
    if (black + saturated == images.size()) {
      const std::string all = "all " + std::to_string(images.size()) + " image" + (images.size() == 1 ? "" : "s");
      const double mean = silent_stats_["input_mean"].get<double>();
      std::string what, first;
      if (black == images.size()) {
        what = "black";
        first = "input mean " + fixed(mean, 3) + " (" + all + " black after de-normalisation: mean below 2 and " +
                "maximum below 10 of 255) at step " + std::to_string(step);
      } else if (saturated == images.size() && raw > 0) {
        what = "saturated";
        first = "input mean " + fixed(mean, 1) + " after de-normalisation, above white (255): " + all +
                " saturated, as raw 0–255 pixel values that were never scaled to [0, 1] and normalised are, at step " +
                std::to_string(step);
      } else if (saturated == images.size()) {
        what = "saturated";
        first = "input mean " + fixed(mean, 3) + " (" + all + " saturated after de-normalisation: mean above 253 " +
                "and minimum above 245 of 255) at step " + std::to_string(step);
      } else {
        what = "black or saturated";
        first = "input mean " + fixed(mean, 3) + " after de-normalisation: " + all + " black or saturated (" +
                std::to_string(black) + " black, " + std::to_string(saturated) + " saturated) at step " +
                std::to_string(step);
      }
      std::string per_image = "de-normalised mean / min / max per image:";
      for (size_t k = 0; k < images.size() && k < 8; ++k) {
        per_image += (k ? ", " : " ") + name(k) + " " + fixed(images[k].mean, 1) + " / " + fixed(images[k].min, 1) +
                     " / " + fixed(images[k].max, 1);
      }
      if (images.size() > 8) per_image += ", …";
      silent_failure(step, "input_denormalised", "input", "image",
                     "input " + what + " after de-normalisation at step " + std::to_string(step) + " (" + all + ")",
                     {first, per_image,
                      "the model trains on images with no text to see; a logged image of this batch looks " + what},
                     {{"images", images.size()}, {"black", black}, {"saturated", saturated}, {"input_mean", mean}});
    }
  }
}

void Monitors::judge_silent_labels(int64_t step, const SilentReadings& r) {
  const auto& inside = r.inside;
  const auto& positives = r.positives;
  const auto& in_boxes = r.in_boxes;
  const auto name = [&](size_t k) { return k < ids_.size() ? ids_[k] : "sample " + std::to_string(k); };
  // 2. Labels without text where the annotations promise words.
  if (silent_.labels) {
    std::vector<size_t> hit;
    for (size_t k = 0; k < inside.size() && k < words_.size(); ++k) {
      if (words_[k] > 0 && inside[k] < 0.5) hit.push_back(k);
    }
    if (!hit.empty()) {
      const size_t k = hit.front();
      const std::string in_all =
          positives[k] < 0.5 ? "none at all" : fixed(positives[k], 0) + " in all, every one masked out";
      std::vector<std::string> evidence = {
          "sample " + name(k) + ": " + std::to_string(words_[k]) + " legible word" + (words_[k] == 1 ? "" : "s") +
              " of trainable size in its annotation, but 0 positive pixels of gt_shrink inside gt_shrink_mask (" +
              in_all + ") at step " + std::to_string(step),
          std::to_string(hit.size()) + " of " + std::to_string(inside.size()) +
              " samples of the batch have legible words and no text to learn in their labels"};
      std::string others;
      for (size_t j = 0; j < inside.size(); ++j) {
        others += (j ? ", " : "") + name(j) + " " + std::to_string(words_[j] < 0 ? 0 : words_[j]) + " words / " +
                  fixed(inside[j], 0) + " kernel pixels";
      }
      evidence.push_back("per sample (legible words / positive kernel pixels inside the mask): " + others);
      silent_failure(step, "labels_degenerate", "label", "gt_shrink",
                     "labels without text at step " + std::to_string(step) + ": " + name(k) + " has " +
                         std::to_string(words_[k]) + " legible words but no positive pixel inside the training mask",
                     evidence,
                     {{"sample", name(k)},
                      {"words", words_[k]},
                      {"inside_mask", inside[k]},
                      {"positives", positives[k]},
                      {"samples_hit", hit.size()}});
    }
    // A text kernel always lies inside its word: kernels mostly outside the
    // annotated words are labels that do not line up with the image.
    std::vector<size_t> off_words;
    std::vector<double> share(inside.size(), 0.0);
    for (size_t k = 0; k < inside.size() && k < words_.size(); ++k) {
      if (words_[k] <= 0 || positives[k] < 1) continue;
      share[k] = std::max(0.0, positives[k] - in_boxes[k]) / positives[k];
      if (share[k] > 0.5) off_words.push_back(k);
    }
    if (!off_words.empty()) {
      const size_t k = off_words.front();
      const std::string pct = fixed(100 * share[k], 0) + " %";
      std::string others;
      for (size_t j = 0; j < inside.size(); ++j) {
        others += (j ? ", " : "") + name(j) + " " +
                  (words_[j] > 0 && positives[j] >= 1 ? fixed(100 * share[j], 0) + " %" : "-");
      }
      silent_failure(
          step, "labels_degenerate", "label", "gt_shrink",
          "labels off the words at step " + std::to_string(step) + ": " + pct + " of " + name(k) +
              "'s text kernel pixels lie outside its annotated words",
          {"sample " + name(k) + ": " + pct + " of its " + fixed(positives[k], 0) +
               " positive kernel pixels lie outside every one of its " + std::to_string(words_[k]) +
               " annotated legible words (a kernel always lies inside its word) at step " + std::to_string(step),
           "the labels do not line up with the image: shifted, scaled or another image's; " +
               std::to_string(off_words.size()) + " of " + std::to_string(inside.size()) + " samples affected",
           "share of kernel pixels outside the annotated words per sample: " + others},
          {{"sample", name(k)},
           {"words", words_[k]},
           {"positives", positives[k]},
           {"outside_share", share[k]},
           {"samples_hit", off_words.size()}});
    }
  }
}

void Monitors::judge_silent_predictions(int64_t step, const SilentReadings& r) {
  const double prob_min = r.prob_min, prob_max = r.prob_max, prob_mean = r.prob_mean;
  const double text_pixels = r.text_pixels;
  // 3. Predictions collapsed: counted over steps with text to find, as the
  // annotations say (Batch::words), or as the labels do when no annotation
  // is known (random data).
  int64_t words = 0;
  bool words_known = false;
  for (int64_t w : words_) {
    if (w >= 0) words_known = true, words += w;
  }
  const bool text_to_find = words_known ? words > 0 : text_pixels > 0;
  if (silent_.predictions && !silent_probs_.empty() && step >= silent_.collapse_after && text_to_find) {
    const double lo = silent_.collapse_margin, hi = 1.0 - silent_.collapse_margin;
    if (prob_max < lo || prob_min > hi) {
      if (collapsed_run_ == 0) collapsed_since_ = step;
      ++collapsed_run_;
    } else {
      collapsed_run_ = 0;
    }
    if (collapsed_run_ >= silent_.collapse_steps) {
      const bool low = prob_max < lo;
      const std::string range = step_range(collapsed_since_, step);
      const std::string first = low ? "probability map entirely below " + fixed(lo, 3) + " (highest " +
                                          fixed(prob_max, 4) + ", mean " + fixed(prob_mean, 4) + ")"
                                    : "probability map entirely above " + fixed(hi, 3) + " (lowest " +
                                          fixed(prob_min, 4) + ", mean " + fixed(prob_mean, 4) + ")";
      silent_failure(
          step, "predictions_collapsed", "prediction", "probability",
          "predictions collapsed to " + std::string(low ? "0" : "1") + " over " + range,
          {first + " for " + std::to_string(collapsed_run_) + " consecutive steps with text to find (" + range +
               "), after a warm-up of " + std::to_string(silent_.collapse_after) + " steps",
           (words_known ? "the images of step " + std::to_string(step) + " hold " + std::to_string(words) +
                              " legible words (their labels " + fixed(text_pixels, 0) +
                              " positive kernel pixels inside the training mask)"
                        : "the labels of step " + std::to_string(step) + " hold " + fixed(text_pixels, 0) +
                              " positive kernel pixels inside the training mask") +
               "; the model predicts " + (low ? "text nowhere" : "text everywhere")},
          {{"prob_min", prob_min}, {"prob_max", prob_max}, {"since", collapsed_since_}, {"steps", collapsed_run_}});
    }
  }
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
