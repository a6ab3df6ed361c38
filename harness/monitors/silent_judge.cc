#include "harness/monitors/silent_judge.h"

#include <algorithm>
#include <cstdio>

namespace dbh::harness::monitors {
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

double SilentReadings::text_pixels() const {
  double total = 0;
  for (double x : inside) total += x;
  return total;
}

std::optional<SilentFinding> SilentJudge::judge(int64_t step, const SilentReadings& r) {
  stats_ = nlohmann::json::object();
  if (!r.images.empty()) {
    double mean = 0, lo = INFINITY, hi = -INFINITY;
    for (const auto& im : r.images) {
      mean += im.mean / static_cast<double>(r.images.size());
      lo = std::min(lo, im.min);
      hi = std::max(hi, im.max);
    }
    stats_["input_mean"] = mean;
    stats_["input_min"] = lo;
    stats_["input_max"] = hi;
  }
  stats_["text_pixels"] = r.text_pixels();
  if (r.has_probabilities) {
    stats_["prob_mean"] = r.prob_mean;
    stats_["prob_min"] = r.prob_min;
    stats_["prob_max"] = r.prob_max;
  }
  if (auto found = judge_input(step, r)) return found;
  if (auto found = judge_labels(step, r)) return found;
  return judge_predictions(step, r);
}

std::optional<SilentFinding> SilentJudge::judge_input(int64_t step, const SilentReadings& r) const {
  const auto& images = r.images;
  const auto name = [&](size_t k) { return k < r.ids.size() ? r.ids[k] : "sample " + std::to_string(k); };
  // 1. Input black or saturated: the thresholds of model::looks_all_black
  // (mean below 2, maximum below 10), and their mirror at white; a mean
  // above white (260) is impossible for pixels normalised from [0, 1].
  if (options_.input && !images.empty()) {
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
      const double mean = stats_["input_mean"].get<double>();
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
      return SilentFinding{"input_denormalised", "input", "image",
                     "input " + what + " after de-normalisation at step " + std::to_string(step) + " (" + all + ")",
                     {first, per_image,
                      "the model trains on images with no text to see; a logged image of this batch looks " + what},
                     {{"images", images.size()}, {"black", black}, {"saturated", saturated}, {"input_mean", mean}}};
    }
  }
  return std::nullopt;
}

std::optional<SilentFinding> SilentJudge::judge_labels(int64_t step, const SilentReadings& r) const {
  const auto& inside = r.inside;
  const auto& positives = r.positives;
  const auto& in_boxes = r.in_boxes;
  const auto name = [&](size_t k) { return k < r.ids.size() ? r.ids[k] : "sample " + std::to_string(k); };
  // 2. Labels without text where the annotations promise words.
  if (options_.labels) {
    std::vector<size_t> hit;
    for (size_t k = 0; k < inside.size() && k < r.words.size(); ++k) {
      if (r.words[k] > 0 && inside[k] < 0.5) hit.push_back(k);
    }
    if (!hit.empty()) {
      const size_t k = hit.front();
      const std::string in_all =
          positives[k] < 0.5 ? "none at all" : fixed(positives[k], 0) + " in all, every one masked out";
      std::vector<std::string> evidence = {
          "sample " + name(k) + ": " + std::to_string(r.words[k]) + " legible word" + (r.words[k] == 1 ? "" : "s") +
              " of trainable size in its annotation, but 0 positive pixels of gt_shrink inside gt_shrink_mask (" +
              in_all + ") at step " + std::to_string(step),
          std::to_string(hit.size()) + " of " + std::to_string(inside.size()) +
              " samples of the batch have legible words and no text to learn in their labels"};
      std::string others;
      for (size_t j = 0; j < inside.size(); ++j) {
        others += (j ? ", " : "") + name(j) + " " + std::to_string(r.words[j] < 0 ? 0 : r.words[j]) + " words / " +
                  fixed(inside[j], 0) + " kernel pixels";
      }
      evidence.push_back("per sample (legible words / positive kernel pixels inside the mask): " + others);
      return SilentFinding{"labels_degenerate", "label", "gt_shrink",
                     "labels without text at step " + std::to_string(step) + ": " + name(k) + " has " +
                         std::to_string(r.words[k]) + " legible words but no positive pixel inside the training mask",
                     evidence,
                     {{"sample", name(k)},
                      {"words", r.words[k]},
                      {"inside_mask", inside[k]},
                      {"positives", positives[k]},
                      {"samples_hit", hit.size()}}};
    }
    // A text kernel always lies inside its word: kernels mostly outside the
    // annotated words are labels that do not line up with the image.
    std::vector<size_t> off_words;
    std::vector<double> share(inside.size(), 0.0);
    for (size_t k = 0; k < inside.size() && k < r.words.size(); ++k) {
      if (r.words[k] <= 0 || positives[k] < 1) continue;
      share[k] = std::max(0.0, positives[k] - in_boxes[k]) / positives[k];
      if (share[k] > 0.5) off_words.push_back(k);
    }
    if (!off_words.empty()) {
      const size_t k = off_words.front();
      const std::string pct = fixed(100 * share[k], 0) + " %";
      std::string others;
      for (size_t j = 0; j < inside.size(); ++j) {
        others += (j ? ", " : "") + name(j) + " " +
                  (r.words[j] > 0 && positives[j] >= 1 ? fixed(100 * share[j], 0) + " %" : "-");
      }
      return SilentFinding{
          "labels_degenerate", "label", "gt_shrink",
          "labels off the words at step " + std::to_string(step) + ": " + pct + " of " + name(k) +
              "'s text kernel pixels lie outside its annotated words",
          {"sample " + name(k) + ": " + pct + " of its " + fixed(positives[k], 0) +
               " positive kernel pixels lie outside every one of its " + std::to_string(r.words[k]) +
               " annotated legible words (a kernel always lies inside its word) at step " + std::to_string(step),
           "the labels do not line up with the image: shifted, scaled or another image's; " +
               std::to_string(off_words.size()) + " of " + std::to_string(inside.size()) + " samples affected",
           "share of kernel pixels outside the annotated words per sample: " + others},
          {{"sample", name(k)},
           {"words", r.words[k]},
           {"positives", positives[k]},
           {"outside_share", share[k]},
           {"samples_hit", off_words.size()}}};
    }
  }
  return std::nullopt;
}

std::optional<SilentFinding> SilentJudge::judge_predictions(int64_t step, const SilentReadings& r) {
  const double prob_min = r.prob_min, prob_max = r.prob_max, prob_mean = r.prob_mean;
  const double text_pixels = r.text_pixels();
  // 3. Predictions collapsed: counted over steps with text to find, as the
  // annotations say (Batch::words), or as the labels do when no annotation
  // is known (random data).
  int64_t words = 0;
  bool words_known = false;
  for (int64_t w : r.words) {
    if (w >= 0) words_known = true, words += w;
  }
  const bool text_to_find = words_known ? words > 0 : text_pixels > 0;
  if (options_.predictions && r.has_probabilities && step >= options_.collapse_after && text_to_find) {
    const double lo = options_.collapse_margin, hi = 1.0 - options_.collapse_margin;
    if (prob_max < lo || prob_min > hi) {
      if (collapsed_run_ == 0) collapsed_since_ = step;
      ++collapsed_run_;
    } else {
      collapsed_run_ = 0;
    }
    if (collapsed_run_ >= options_.collapse_steps) {
      const bool low = prob_max < lo;
      const std::string range = step_range(collapsed_since_, step);
      const std::string first = low ? "probability map entirely below " + fixed(lo, 3) + " (highest " +
                                          fixed(prob_max, 4) + ", mean " + fixed(prob_mean, 4) + ")"
                                    : "probability map entirely above " + fixed(hi, 3) + " (lowest " +
                                          fixed(prob_min, 4) + ", mean " + fixed(prob_mean, 4) + ")";
      return SilentFinding{
          "predictions_collapsed", "prediction", "probability",
          "predictions collapsed to " + std::string(low ? "0" : "1") + " over " + range,
          {first + " for " + std::to_string(collapsed_run_) + " consecutive steps with text to find (" + range +
               "), after a warm-up of " + std::to_string(options_.collapse_after) + " steps",
           (words_known ? "the images of step " + std::to_string(step) + " hold " + std::to_string(words) +
                              " legible words (their labels " + fixed(text_pixels, 0) +
                              " positive kernel pixels inside the training mask)"
                        : "the labels of step " + std::to_string(step) + " hold " + fixed(text_pixels, 0) +
                              " positive kernel pixels inside the training mask") +
               "; the model predicts " + (low ? "text nowhere" : "text everywhere")},
          {{"prob_min", prob_min}, {"prob_max", prob_max}, {"since", collapsed_since_}, {"steps", collapsed_run_}}};
    }
  }
  return std::nullopt;
}

}  // namespace dbh::harness::monitors
