#include "harness/cli/eval_page.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/report/markdown_html.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

json polygon_json(const model::Polygon& poly) {
  json points = json::array();
  for (const auto& p : poly) points.push_back({p.x, p.y});
  return points;
}

json match_json(int64_t index) { return index < 0 ? json(nullptr) : json(index); }

json image_json(const model::ImageEvaluation& e, const std::vector<model::WordAnnotation>& words) {
  json j;
  j["file"] = e.file;
  j["width"] = e.resize.width;
  j["height"] = e.resize.height;
  j["input_width"] = e.resize.input_width;
  j["input_height"] = e.resize.input_height;
  j["scale"] = e.resize.scale;
  j["counts"] = {{"gt", e.match.counts.gt},
                 {"det", e.match.counts.det},
                 {"matched", e.match.counts.matched}};
  j["precision"] = e.metrics.precision;
  j["recall"] = e.metrics.recall;
  j["hmean"] = e.metrics.hmean;
  j["probability"] = {{"mean", e.probability.mean},
                      {"max", e.probability.max},
                      {"text_fraction", e.probability.text_fraction}};
  json gt = json::array();
  for (size_t g = 0; g < e.gt.size(); ++g) {
    json w;
    w["id"] = g < words.size() ? words[g].id : std::to_string(g);
    w["polygon"] = polygon_json(e.gt[g]);
    w["ignore"] = static_cast<bool>(e.gt_ignore[g]);
    w["status"] = model::to_string(e.match.gt_status[g]);
    w["detection"] = match_json(e.match.gt_match[g]);
    gt.push_back(std::move(w));
  }
  j["ground_truth"] = std::move(gt);
  json det = json::array();
  for (size_t d = 0; d < e.detections.size(); ++d) {
    json w;
    w["polygon"] = polygon_json(e.detections[d].polygon);
    w["score"] = e.detections[d].score;
    w["status"] = model::to_string(e.match.det_status[d]);
    w["ground_truth"] = match_json(e.match.det_match[d]);
    det.push_back(std::move(w));
  }
  j["detections"] = std::move(det);
  return j;
}

}  // namespace

report::EvalFacts eval_facts(const model::DatasetEvaluation& result, const model::PostprocessOptions& post) {
  const auto n = static_cast<int64_t>(result.images.size());
  report::EvalFacts facts;
  facts.images = n;
  facts.gt = result.overall.counts.gt;
  facts.det = result.overall.counts.det;
  facts.matched = result.overall.counts.matched;
  facts.precision = result.overall.precision;
  facts.recall = result.overall.recall;
  facts.hmean = result.overall.hmean;
  facts.binarize_thresh = post.binarize_thresh;
  facts.box_thresh = post.box_thresh;
  for (const auto& e : result.images) {
    facts.max_probability = std::max(facts.max_probability, e.probability.max);
    facts.mean_text_fraction += e.probability.text_fraction / static_cast<double>(std::max<int64_t>(1, n));
  }
  return facts;
}

json eval_json(const EvalPage& p) {
  json j;
  j["schema_version"] = 1;
  j["command"] = "eval";
  j["weights"] = {{"path", p.weights_abs},
                  {"format", p.loaded.format},
                  {"step", p.loaded.step >= 0 ? json(p.loaded.step) : json(nullptr)},
                  {"loaded", p.loaded.loaded},
                  {"tensors", p.total},
                  {"missing", p.loaded.missing},
                  {"unexpected", p.loaded.unexpected}};
  j["model"] = {{"encoder", "resnet" + std::to_string(p.depth)},
                {"decoder", model::to_string(p.decoder)}};
  j["data"] = {{"root", fs::absolute(p.o.data).lexically_normal().string()},
               {"format", p.scan.format},
               {"images", p.n()},
               {"on_invalid", p.o.on_invalid},
               {"defects", p.scan.defects.size()}};
  j["settings"] = {{"size", p.o.size},
                   {"side", p.o.side},
                   {"batch_size", p.o.batch_size},
                   {"device", p.o.device},
                   {"threads", p.threads},
                   {"binarize_thresh", p.post.binarize_thresh},
                   {"box_thresh", p.post.box_thresh},
                   {"unclip_ratio", p.post.unclip_ratio},
                   {"max_candidates", p.post.max_candidates},
                   {"min_size", p.post.min_size},
                   {"iou_thresh", p.o.iou_thresh}};
  j["overall"] = {{"precision", p.result.overall.precision},
                  {"recall", p.result.overall.recall},
                  {"hmean", p.result.overall.hmean},
                  {"gt", p.result.overall.counts.gt},
                  {"det", p.result.overall.counts.det},
                  {"matched", p.result.overall.counts.matched}};
  j["timing"] = {{"wall_s", p.wall},
                 {"batches", p.result.timing.batches},
                 {"preprocess_s", p.result.timing.preprocess_s},
                 {"inference_s", p.result.timing.inference_s},
                 {"inference_images_per_s", p.inference_per_s()},
                 {"postprocess_ms_per_image", p.post_ms()},
                 {"matching_ms_per_image", p.match_ms()}};
  j["overlays"] = p.overlays;
  json images = json::array();
  for (size_t i = 0; i < p.result.images.size(); ++i) {
    images.push_back(image_json(p.result.images[i], p.scan.images[i].words));
  }
  j["images"] = std::move(images);
  j["environment"] = p.environment;
  j["reading"] = json::array();
  for (const auto& f : p.reading) j["reading"].push_back({{"id", f.id}, {"meaning", f.meaning}, {"next", f.next}});
  return j;
}

std::string eval_markdown(const EvalPage& p) {
  std::ostringstream md;
  md << "# Evaluation of " << markdown_inline(fs::path(p.o.weights).filename().string()) << "\n\n"
     << "**P " << fixed(p.result.overall.precision) << " · R " << fixed(p.result.overall.recall)
     << " · H " << fixed(p.result.overall.hmean) << "** — " << p.result.overall.counts.matched
     << " matched of " << p.result.overall.counts.gt << " ground truths and "
     << p.result.overall.counts.det << " detections (ICDAR 2015, IoU > " << p.o.iou_thresh
     << ", don't-care words excluded) on " << p.n() << " images.\n\n"
     << "## Reading\n\n";
  for (const auto& f : p.reading)
    md << "- " << markdown_inline(f.meaning) << ".\n  Next: " << markdown_inline(f.next) << ".\n";
  md << "\n## Settings\n\n"
     << "| setting | value |\n|---|---|\n"
     << "| weights | " << markdown_inline(p.weights_abs) << " (" << p.loaded.format
     << (p.loaded.step >= 0 ? ", step " + std::to_string(p.loaded.step) : std::string()) << ", "
     << p.loaded.loaded << " of " << p.total << " tensors) |\n"
     << "| model | " << p.arch << " |\n"
     << "| data | " << markdown_inline(fs::absolute(p.o.data).lexically_normal().string()) << " ("
     << p.scan.format << ") |\n"
     << "| resize | " << p.o.side << " side " << p.o.size << ", padded to multiples of 32 |\n"
     << "| post-processing | thresh " << p.post.binarize_thresh << ", box_thresh " << p.post.box_thresh
     << ", unclip " << p.post.unclip_ratio << " |\n"
     << "| speed | " << fixed(p.inference_per_s(), 2) << " images/s inference (batch " << p.o.batch_size
     << ", " << p.threads << " threads, " << p.o.device << "), "
     << fixed(p.post_ms(), 2) << " ms/image post-processing |\n\n"
     << "## Per image\n\n| image | GT | det | matched | P | R | H |\n|---|---|---|---|---|---|---|\n";
  for (const auto& e : p.result.images) {
    md << "| " << markdown_inline(e.file) << " | " << e.match.counts.gt << " | "
       << e.match.counts.det << " | " << e.match.counts.matched << " | "
       << fixed(e.metrics.precision) << " | " << fixed(e.metrics.recall) << " | "
       << fixed(e.metrics.hmean) << " |\n";
  }
  if (!p.overlays.empty()) {
    md << "\n## Worst images\n\nGround truth green, don't-care grey, predictions red.\n\n";
    for (const auto& item : p.overlays) {
      md << item["rank"].get<int64_t>() << ". " << markdown_inline(item["image"].get<std::string>())
         << " (H " << fixed(item["hmean"].get<double>()) << ")\n\n   !["
         << markdown_inline(item["image"].get<std::string>()) << "]("
         << item["file"].get<std::string>() << ")\n\n";
    }
  }
  return md.str();
}

void write_eval_pages(const fs::path& out, const EvalPage& page) {
  write_file_atomically((out / "eval.json").string(),
                        eval_json(page).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  const std::string md = eval_markdown(page);
  write_file_atomically((out / "eval.md").string(), md);
  write_file_atomically((out / "eval.html").string(),
                        report::markdown_page_html("Evaluation of " + fs::path(page.o.weights).filename().string(),
                                                   md, out.string()));
}

std::string metrics_line(const model::EvalResult& r) {
  return "P " + fixed(r.precision) + "  R " + fixed(r.recall) + "  H " + fixed(r.hmean) +
         "  (gt " + std::to_string(r.counts.gt) + ", det " + std::to_string(r.counts.det) +
         ", matched " + std::to_string(r.counts.matched) + ")";
}

}  // namespace dbh::harness::cli
