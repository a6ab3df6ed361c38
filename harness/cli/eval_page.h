#pragma once
// The pages of `dbh eval` (eval.json, eval.md, eval.html), written from the
// values an evaluation produced; free of LibTorch.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/eval_command.h"
#include "harness/report/eval_reading.h"
#include "model/choices.h"
#include "model/data/scan.h"
#include "model/eval/evaluation.h"

namespace dbh::harness::cli {

/// One evaluation as its pages show it: every value eval.json, eval.md and
/// eval.html are written from.
struct EvalPage {
  const EvalCommandOptions& o;
  std::string arch;
  int64_t depth = 18;
  model::DecoderKind decoder{};
  std::string weights_abs;
  const model::ModelStateReport& loaded;
  size_t total = 0;  // the model's parameters and buffers
  const model::ScanResult& scan;
  const model::DatasetEvaluation& result;
  model::PostprocessOptions post;
  int64_t threads = 0;  // intra-op threads the inference used
  double wall = 0;
  nlohmann::ordered_json overlays;  // write_overlays' index
  std::vector<report::EvalFinding> reading;
  nlohmann::ordered_json environment;  // env::environment_json of this machine

  int64_t n() const { return static_cast<int64_t>(result.images.size()); }
  double inference_per_s() const {
    return result.timing.inference_s > 0 ? static_cast<double>(n()) / result.timing.inference_s : 0.0;
  }
  double post_ms() const { return n() > 0 ? 1e3 * result.timing.postprocess_s / static_cast<double>(n()) : 0.0; }
  double match_ms() const { return n() > 0 ? 1e3 * result.timing.matching_s / static_cast<double>(n()) : 0.0; }
};

/// What the reading of an evaluation starts from (Note [Reading an
/// evaluation]).
report::EvalFacts eval_facts(const model::DatasetEvaluation& result, const model::PostprocessOptions& post);

/// eval.json.
nlohmann::ordered_json eval_json(const EvalPage& page);

/// eval.md (and, through markdown_page_html, eval.html).
std::string eval_markdown(const EvalPage& page);

/// Writes eval.json, eval.md and the same page for a browser, its overlays
/// embedded, into `out`.
void write_eval_pages(const std::filesystem::path& out, const EvalPage& page);

/// "P 0.812  R 0.640  H 0.716  (gt 25, det 20, matched 16)".
std::string metrics_line(const model::EvalResult& r);

}  // namespace dbh::harness::cli
