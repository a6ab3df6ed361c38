#include "harness/worker/validation.h"

#include <algorithm>
#include <chrono>

#include <opencv2/core.hpp>

#include "harness/common/files.h"
#include "harness/common/png.h"
#include "harness/common/text.h"
#include "harness/faults/injectors.h"
#include "harness/worker/training.h"
#include "model/data/image_decode.h"
#include "model/data/scan.h"
#include "model/eval/infer.h"
#include "model/eval/overlay.h"

namespace dbh::harness::worker {
namespace fs = std::filesystem;

namespace {

// The evaluation settings of `s`; the reference post-processing (the
// defaults) when `reference_postprocess`, else the scenario's as a fault may
// have changed them (FaultInjector::on_validation after step `step_taken`).
model::InferenceOptions inference_options(const scenario::Scenario& s, bool reference_postprocess,
                                          faults::FaultInjector* faults = nullptr, int64_t step_taken = -1) {
  model::PostprocessOptions pp;
  if (!reference_postprocess) {
    pp.binarize_thresh = s.data.val.binarize_thresh;
    pp.box_thresh = s.data.val.box_thresh;
    pp.unclip_ratio = s.data.val.unclip_ratio;
    if (faults != nullptr) faults->on_validation(step_taken, pp);
  }
  return model::InferenceOptions()
      .size(s.data.val.size)
      .side(s.data.val.side)
      .batch_size(s.data.val.batch_size)
      .device(s.hardware.device)
      .channels_last(s.train.channels_last.value_or(false))
      .postprocess(pp);
}

}  // namespace

ValidationSet open_validation_set(const scenario::Scenario& s, std::vector<std::string>& warnings) {
  const model::OnInvalid policy = dataset_options(s, s.data.val.path).on_invalid;
  const auto scan = model::scan_dataset(s.data.val.path, policy);
  if (!scan.readable || scan.images.empty() || (policy == model::OnInvalid::kError && !scan.defects.empty())) {
    std::vector<model::Defect> defects = scan.defects;
    if (defects.empty()) {
      defects.push_back(model::Defect{model::DefectKind::kUnreadableFile, s.data.val.path, "", "", 0,
                                      s.data.val.path + ": expected a validation dataset with annotated images, "
                                                        "got none"});
    }
    throw model::DataError(defects);
  }
  for (const auto& defect : scan.defects) warnings.push_back("validation set: " + defect.message);
  return ValidationSet{s.data.val.path, scan.images};
}

bool validates_after(const scenario::Scenario& s, const ValidationSet& v, int64_t next) {
  return s.train.eval_every > 0 && !v.images.empty() && (next % s.train.eval_every == 0 || next == s.train.last_step());
}

ValidationResult validate(model::DbNet& net, const scenario::Scenario& s, const ValidationSet& v, int64_t run, int64_t step,
                          bool last, const fs::path& dir, faults::FaultInjector* faults) {
  const auto t0 = std::chrono::steady_clock::now();
  const model::InferenceOptions options = inference_options(s, false, faults, step - 1);
  const auto result = model::evaluate(net, v.root, v.images, options);
  double prob_mean = 0, text_fraction = 0;
  for (const auto& e : result.images) prob_mean += e.probability.mean, text_fraction += e.probability.text_fraction;
  const double n = std::max<double>(1.0, static_cast<double>(result.images.size()));
  proto::Eval ev;
  ev.run = run;
  ev.step = step;
  ev.precision = result.overall.precision;
  ev.recall = result.overall.recall;
  ev.hmean = result.overall.hmean;
  ev.gt = result.overall.counts.gt;
  ev.det = result.overall.counts.det;
  ev.matched = result.overall.counts.matched;
  ev.images = static_cast<int64_t>(result.images.size());
  ev.prob_mean = prob_mean / n;
  ev.text_fraction = text_fraction / n;
  const model::PostprocessOptions& used = options.postprocess();
  const model::PostprocessOptions reference;
  const bool custom = used.binarize_thresh != reference.binarize_thresh || used.box_thresh != reference.box_thresh ||
                      used.unclip_ratio != reference.unclip_ratio;
  if (custom && result.overall.counts.det == 0) {
    // Would the reference settings keep boxes in these maps? Tells broken
    // post-processing settings from a model that finds nothing.
    ev.det_reference = model::evaluate(net, v.root, v.images, inference_options(s, true)).overall.counts.det;
  }
  ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ValidationResult out;
  out.eval = ev;
  if (!last || s.data.val.overlays == 0) return out;
  out.drew_overlays = true;
  std::vector<std::string>& files = out.overlays;
  const fs::path overlay_dir = dir / "eval-overlays";
  make_directories_no_follow(overlay_dir.string());
  for (const size_t i : model::worst_images(result, static_cast<size_t>(s.data.val.overlays))) {
    const auto& e = result.images[i];
    std::vector<model::Polygon> det;
    for (const auto& d : e.detections) det.push_back(d.polygon);
    const cv::Mat image = model::decode_image(model::image_path(v.root, e.file));
    const std::string name = std::to_string(files.size() + 1) + "-" + safe_file_name(fs::path(e.file).stem().string()) + ".png";
    if (write_png((overlay_dir / name).string(), model::draw_overlay(image, e.gt, e.gt_ignore, det))) {
      files.push_back((fs::path("eval-overlays") / name).string());
    }
  }
  return out;
}

}  // namespace dbh::harness::worker
