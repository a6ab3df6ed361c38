// What a scenario reads, checked before anything runs (Note [Decode, then
// check] in scenario.h): the folders and files it names, its dataset's
// usability and size, and the checks the caller passes in.

#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/scenario/reader.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "model/data/scan.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

namespace {

// What the checks need of a dataset's annotations: how many images they
// list (none when they cannot be read) and the first defect no policy
// accepts ("" when none). A bisection loads its scenario once per probe (a
// `bisect data` probe with its data.subset): the annotations are scanned
// again only when they or the folders' listings changed.
struct DatasetFacts {
  std::optional<int64_t> images;
  std::string refusal;
};

const DatasetFacts& dataset_facts(const std::string& path) {
  std::ostringstream key;
  for (const char* part : {"", "annotations.json", "icdar", "images"}) {
    key << file_state((fs::path(path) / part).string()) << '\0';
  }
  static std::map<std::string, DatasetFacts> answers;
  if (const auto it = answers.find(key.str()); it != answers.end()) return it->second;
  if (answers.size() >= 64) answers.clear();
  DatasetFacts facts;
  const model::ScanResult scan = model::scan_dataset(path, model::OnInvalid::kError, {}, /*check_images=*/false);
  if (scan.readable) facts.images = scan.images_listed;
  for (const auto& d : scan.defects) {
    if (model::refuses_dataset(d.kind)) {
      facts.refusal = one_line(d.message);
      break;
    }
  }
  return answers.emplace(key.str(), std::move(facts)).first->second;
}

void check_folder(const Value& tree, const char* key, const std::string& path, const char* expected) {
  if (!path.empty() && !fs::is_directory(path)) fail(where(tree, key), key, expected, quoted_excerpt(path));
}

void check_dataset(const Value& tree, const Scenario& s) {
  if (s.data.source != DataSource::kReal || s.data.path.empty()) return;
  check_folder(tree, DBH_SCENARIO_KEY(data.path), s.data.path, "an existing dataset folder");
  // The annotation file is read whole: it must be a regular file, never a
  // FIFO or a device that would block or never end.
  const fs::path ann = fs::path(s.data.path) / "annotations.json";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(ann, ec)) || fs::is_symlink(fs::symlink_status(ann, ec))) {
    check_input_file(ann.string(), "an annotation file (a regular file)", where(tree, DBH_SCENARIO_KEY(data.path)).str(),
                     DBH_SCENARIO_KEY(data.path));
  }
  // A dataset no policy can use (an image annotated twice, a name that
  // leaves the folder) is bad input, as in every command that reads it, not
  // a training failure to report.
  if (const std::string& refusal = dataset_facts(s.data.path).refusal; !refusal.empty()) {
    fail(where(tree, DBH_SCENARIO_KEY(data.path)), DBH_SCENARIO_KEY(data.path),
         "a dataset every image of which is annotated once, inside its folder", refusal);
  }
}

// The samples training reads from a real dataset: its size less the
// held-out ones, which must leave some; none when it cannot be read.
std::optional<int64_t> training_samples(const Value& tree, const Scenario& s) {
  std::optional<int64_t> samples = dataset_facts(s.data.path).images;
  if (samples && s.data.val.holdout > 0) {
    if (s.data.val.holdout >= *samples) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.holdout)), DBH_SCENARIO_KEY(data.val.holdout),
           "fewer samples than the dataset's " + std::to_string(*samples) + " (some must be left to train on)",
           std::to_string(s.data.val.holdout));
    }
    // Training sees the samples before the held-out ones.
    samples = *samples - s.data.val.holdout;
  }
  return samples;
}

}  // namespace

void check_scenario_inputs(const Scenario& s, const Value& tree, const InputChecks& checks) {
  if (s.worker.external()) check_folder(tree, DBH_SCENARIO_KEY(worker.cwd), s.worker.cwd, "an existing folder");
  // An external worker's weights and checkpoints are files in its own format
  // (docs/worker-protocol.md: opaque to dbh), checked only as files it can
  // read; dbh's worker's are LibTorch archives, checked whole.
  const auto check_weights = [&](const std::string& path, const char* key) {
    if (s.worker.external()) {
      check_input_file(path, "a checkpoint file the worker can read", where(tree, key).str(), key);
    } else {
      check_checkpoint_file(path, where(tree, key).str(), key);
    }
  };
  if (!s.model.weights.empty()) check_weights(s.model.weights, DBH_SCENARIO_KEY(model.weights));
  check_dataset(tree, s);
  check_folder(tree, DBH_SCENARIO_KEY(data.val.path), s.data.val.path, "an existing dataset folder");
  if (!s.train.resume_from.empty()) check_weights(s.train.resume_from, DBH_SCENARIO_KEY(train.resume_from));
  // Sample indices must exist in the dataset the run reads (synthetic data's
  // were checked with the scenario); the dataset is read once, and only
  // when an index needs it.
  if (s.data.source == DataSource::kReal) {
    std::optional<std::optional<int64_t>> samples;
    auto read = [&]() -> std::optional<int64_t> {
      if (!samples) samples = training_samples(tree, s);
      return *samples;
    };
    if (!s.data.subset.empty() || s.data.val.holdout > 0) {
      if (const auto n = read()) check_subset_indices(tree, s, *n);
    }
    check_fault_placements(tree, s, read, /*reads_inputs=*/true);
  }
  if (checks.model_files != nullptr && !s.worker.external()) {
    if (const auto problem = checks.model_files(s)) {
      fail(where(tree, problem->key), problem->key, problem->expected, problem->got);
    }
  }
}

}  // namespace dbh::harness::scenario
