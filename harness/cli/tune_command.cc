#include "harness/cli/tune_command.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <system_error>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/json_fields.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/report/report.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

std::string to_string(TuneVerdict v) {
  switch (v) {
    case TuneVerdict::kNothingToChoose: return "nothing to choose";
    case TuneVerdict::kCached: return "cached";
    case TuneVerdict::kMeasured: return "measured";
    case TuneVerdict::kUntrusted: return "untrusted";
    case TuneVerdict::kFailed: return "failed";
  }
  return "?";
}

TuneVerdict judge_tuning(const nlohmann::json& record) {
  if (record.is_null()) return TuneVerdict::kNothingToChoose;
  if (record.contains("error")) return TuneVerdict::kFailed;
  if (record.contains("untrusted")) return TuneVerdict::kUntrusted;
  for (const char* key : {"channels_last", "threads"}) {
    if (record.contains(key) && record[key].is_object() && field_or(record[key], "source", std::string()) == "measured") {
      return TuneVerdict::kMeasured;
    }
  }
  return TuneVerdict::kCached;
}

int tune_exit_code(const std::vector<TuneVerdict>& verdicts) {
  for (const auto v : verdicts) {
    if (v == TuneVerdict::kUntrusted || v == TuneVerdict::kFailed) return 1;
  }
  return 0;
}

namespace {

// The measuring worker's folder, inside dbh's cache and removed whatever
// happens (a successful measurement removes it itself).
class MeasuringFolder {
 public:
  explicit MeasuringFolder(size_t index) {
    const std::string root = cache_root();
    if (root.empty()) {
      throw UsageError("expected a cache folder to keep the measurements in ($" + std::string(kCacheDirEnv) +
                       ", $XDG_CACHE_HOME or $HOME), got none of them set");
    }
    // The cache must be a folder dbh can write, before anything is measured.
    std::error_code ec;
    fs::create_directories(fs::path(root) / "tuning", ec);
    if (ec) {
      throw UsageError(root + " (from " + cache_root_origin() +
                       "): expected a folder to keep the measurements in, got " + describe_path(root) + " (" +
                       ec.message() + ")");
    }
    path_ = fs::path(root) / "tuning" / ("measuring-" + std::to_string(::getpid()) + "-" + std::to_string(index));
  }
  ~MeasuringFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  MeasuringFolder(const MeasuringFolder&) = delete;
  MeasuringFolder& operator=(const MeasuringFolder&) = delete;
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

}  // namespace

int run_tune_command(const TuneCommandOptions& o) {
  if (o.scenarios.empty()) throw UsageError("dbh tune: expected at least one scenario file, got none");
  // Compute: every scenario valid before anything is measured.
  std::vector<scenario::Scenario> scenarios;
  for (const auto& path : o.scenarios) scenarios.push_back(scenario::load_scenario(path, o.overrides, o.checks));
  // dbh never writes into your data: a cache folder inside a scenario's
  // dataset is refused before any folder is made there.
  if (const std::string root = cache_root(); !root.empty()) {
    for (const auto& s : scenarios) {
      check_outside_datasets("dbh tune", "cache folder (from " + cache_root_origin() + ")", root,
                             scenario::dataset_folders(s));
    }
  }
  supervisor::install_stop_handlers();
  std::vector<TuneVerdict> verdicts;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    scenario::Scenario& s = scenarios[i];
    nlohmann::json record;
    {
      const MeasuringFolder work(i);
      record = supervisor::resolve_measured_choices(s, work.str(), supervisor::MeasureBudget::kIgnore);
    }
    if (const int signal_number = supervisor::stop_requested()) throw supervisor::Interrupted(signal_number);
    // Decide, then write.
    const TuneVerdict verdict = judge_tuning(record);
    verdicts.push_back(verdict);
    std::cout << one_line(s.name) << ": " << to_string(verdict);
    if (verdict == TuneVerdict::kNothingToChoose) {
      std::cout << " (" << (s.worker.external() ? "the worker trains with its own settings"
                                                 : "train.channels_last and train.threads are set, or it does not train")
                << ")";
    } else {
      std::cout << ": " << terminal_text(report::measured_choices_line(record));
    }
    std::cout << "\n";
  }
  const int code = tune_exit_code(verdicts);
  if (code != 0) {
    std::vector<std::string> again = {self_command(), "tune"};
    again.insert(again.end(), o.scenarios.begin(), o.scenarios.end());
    again.insert(again.end(), o.overrides.begin(), o.overrides.end());
    std::cout << "dbh tune: a measurement was not trusted or failed: those scenarios run with PyTorch's defaults "
                 "until a measurement on an idle machine succeeds; then run\n  "
              << shell_command(again) << "\n";
  }
  return code;
}

}  // namespace dbh::harness::cli
