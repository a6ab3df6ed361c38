#include "harness/common/environment_vars.h"
#include "harness/common/json_fields.h"
#include "harness/supervisor/tuning.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "harness/common/cpu.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/progress.h"
#include "harness/common/hash.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/supervisor/machine.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning_cache.h"
#include "harness/scenario/schema.h"
#include "harness/step_code.h"

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double best_of(const json& c) {
  double best = std::numeric_limits<double>::infinity();
  if (c.contains("seconds") && c["seconds"].is_array()) {
    for (const auto& v : c["seconds"]) {
      if (v.is_number()) best = std::min(best, v.get<double>());
    }
  }
  return best;
}

// The spread of a candidate's timed steps: its slowest less its fastest.
double spread_of(const json& c) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  if (c.contains("seconds") && c["seconds"].is_array()) {
    for (const auto& v : c["seconds"]) {
      if (v.is_number()) lo = std::min(lo, v.get<double>()), hi = std::max(hi, v.get<double>());
    }
  }
  return hi >= lo ? hi - lo : 0.0;
}

// Runs `dbh __tune` as a supervised trial; the `tuning` event's fields, or
// an object with `error`.
json measure(const scenario::Scenario& s, const fs::path& dir, double budget_seconds) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path resolved = dir / "scenario.resolved.json";
  write_file_atomically(resolved.string(), scenario::resolved_json(s) + "\n");
  TrialSpec spec;
  spec.argv = {"/proc/self/exe", "__tune", "--scenario", resolved.string()};
  if (budget_seconds > 0) {
    char text[32];  // every digit: std::to_string would write 1e-7 as 0.000000, no budget
    std::snprintf(text, sizeof text, "%.9g", budget_seconds);
    spec.argv.push_back("--budget-s");
    spec.argv.push_back(text);
  }
  spec.run_dir = dir.string();
  spec.deadline_s = std::min(s.limits.deadline_s, 900.0);
  spec.silence_s = s.limits.silence_s;
  spec.grace_s = s.limits.grace_s;
  spec.stacks_timeout_s = 0;  // a measurement that hangs is reported, not debugged
  // Note [No silent minute]: each timed step counted, with the time left.
  Progress progress("dbh: measuring layout and threads", "timed steps");
  std::optional<proto::Tuning> measured;  // the first `tuning` event
  spec.on_event = [&progress, &measured](const proto::Event& e) {
    if (e.type == proto::event::kTuning && !measured) measured = proto::tuning_from(e);
    if (e.type != proto::event::kTuningProgress) return;
    const proto::TuningProgress p = proto::tuning_progress_from(e);
    progress.update(p.done, p.total);
  };
  const TrialResult r = run_trial(spec);
  progress.finish();
  if (measured) {
    json j = proto::to_json(*measured);
    if (!measured->error && r.exit_code == 0) return j;
    if (!measured->error) j["error"] = "the measuring worker exited with status " + std::to_string(r.exit_code);
    return j;
  }
  std::string why = !r.spawn_error.empty() ? r.spawn_error
                    : r.timed_out         ? "the measuring worker ran past its deadline"
                    : r.hung              ? "the measuring worker fell silent"
                    : r.interrupted       ? "interrupted"
                    : r.term_signal != 0  ? "the measuring worker was killed by signal " + std::to_string(r.term_signal)
                                          : "the measuring worker wrote no result (exit status " +
                                                std::to_string(r.exit_code) + ")";
  if (!r.stderr_tail.empty()) why += ": " + one_line(r.stderr_tail.substr(r.stderr_tail.size() > 300 ? r.stderr_tail.size() - 300 : 0));
  return {{"error", why}};
}

// The finite, non-negative number the environment variable `name` holds,
// else (unset or empty) `fallback`; anything else is refused, naming it.
double non_negative_env(const char* name, double fallback, const char* what) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  double x = 0;  // decimal only: strtod would also read "0x10" and "1p3"
  if (scenario::parse_double(v, &x) && x >= 0) return x;
  throw UsageError(std::string(name) + ": expected " + what + ", got \"" + one_line(v) + "\"");
}

// Cores other processes may keep busy while candidates are timed before the
// measurement is not trusted (Note [A measurement to trust]):
// $DBH_TUNE_MAX_OTHERS_CORES, else kMaxOthersCores.
double max_others_cores() {
  return non_negative_env("DBH_TUNE_MAX_OTHERS_CORES", kMaxOthersCores, "a number of cores, 0 or more (e.g. 0.5)");
}

// The seconds a measurement may take (Note [A measurement's budget]):
// $DBH_TUNE_BUDGET_S (0 = no budget), else kMeasureBudgetSeconds.
double measure_budget_seconds() {
  return non_negative_env("DBH_TUNE_BUDGET_S", kMeasureBudgetSeconds, "a number of seconds, 0 or more (0: no budget)");
}

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 1 ? "%.2g s" : seconds < 10 ? "%.1f s" : "%.0f s", seconds);
  return buf;
}

std::string cores_text(double cores) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", cores);
  return buf;
}

// Note [A measurement to trust]: "" when `others` (the cores other processes
// kept busy `when`; < 0: not read) lets a reading last, else why it does not.
std::string untrusted_load(double others, const std::string& when) {
  if (others >= 0 && others <= max_others_cores()) return "";
  if (others < 0) return "other processes' load " + when + " could not be read";
  return "other processes kept " + cores_text(others) + " cores busy " + when + " (at most " +
         cores_text(max_others_cores()) + " is trusted)";
}

}  // namespace

int64_t choose_candidate(const json& candidates, bool default_channels_last, int64_t default_threads) {
  if (!candidates.is_array()) return -1;
  int64_t best = -1, fallback = -1;
  double best_s = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    const double t = best_of(c);
    if (!std::isfinite(t)) continue;
    if (t < best_s) {
      best_s = t;
      best = static_cast<int64_t>(i);
    }
    if (field_or(c, "channels_last", !default_channels_last) == default_channels_last &&
        field_or(c, "threads", int64_t{0}) == default_threads) {
      fallback = static_cast<int64_t>(i);
    }
  }
  if (best < 0) return -1;
  if (fallback >= 0) {
    // Note [A measurement to trust]: the winner must beat PyTorch's default
    // by the margin and by more than either one's own step-to-step spread;
    // a difference inside the noise is a tie, which keeps the default.
    const json& d = candidates[static_cast<size_t>(fallback)];
    const double gain = best_of(d) - best_s;
    const double noise = std::max(spread_of(d), spread_of(candidates[static_cast<size_t>(best)]));
    if (gain <= best_s * kDefaultMargin || gain <= noise) return fallback;
  }
  return best;
}

namespace {

// Applies a resolved record's values to `s` (the settings it left to auto).
void apply_record(const json& record, scenario::Scenario& s) {
  if (!s.train.channels_last.has_value()) s.train.channels_last = field_or(record["channels_last"], "value", false);
  if (s.train.threads == scenario::TrainConfig::kAutoThreads) {
    s.train.threads = field_or(record["threads"], "value", available_cores());
  }
}

// The record of PyTorch's defaults for what `s` leaves to auto, and its
// explicit settings.
json default_record(const scenario::Scenario& s) {
  const bool auto_layout = !s.train.channels_last.has_value();
  const bool auto_threads = s.train.threads == scenario::TrainConfig::kAutoThreads;
  const int64_t cores = available_cores();
  json record = {{"channels_last", {{"value", false}, {"source", auto_layout ? "default" : "explicit"}}},
                 {"threads", {{"value", cores}, {"source", auto_threads ? "default" : "explicit"}}}};
  if (!auto_layout) record["channels_last"]["value"] = *s.train.channels_last;
  if (!auto_threads) record["threads"]["value"] = s.train.threads > 0 ? s.train.threads : cores;
  return record;
}

// Writes a cache entry (a measurement or a verdict) and names it in the
// record, or says in the record why it could not.
void write_entry(const fs::path& file, const json& entry, json& record) {
  try {
    write_file_atomically(file.string(), entry.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
    record["cache"] = file.string();
    internal::trim_cache(file.parent_path());
  } catch (const std::exception& e) {
    record["cache_note"] = std::string("not cached: ") + one_line(e.what());
  }
}

// The record's account of a measurement over its budget (Note [A
// measurement's budget]), from the verdict `v` (measured now or cached).
void note_over_budget(json& record, const json& v, const scenario::Scenario& s) {
  const double step = field_or(v, "over_budget_step_seconds", 0.0), least = field_or(v, "least_seconds", 0.0);
  // The command that measures this very setup, to paste.
  std::vector<std::string> tune = {self_command(), "tune"};
  if (!s.file.empty()) {
    std::error_code ec;
    const fs::path file = fs::absolute(s.file, ec);
    tune.push_back(ec ? s.file : file.lexically_normal().string());
  }
  tune.insert(tune.end(), s.overrides.begin(), s.overrides.end());
  const int64_t probe = field_or(v, "probe_size", int64_t{0});
  // A step estimated from the probe's, or the first full step's own time.
  const std::string step_text =
      probe > 0 ? "a step is about " + seconds_text(step) + " (a batch-1 step at " + std::to_string(probe) + "², " +
                      "by pixels)"
                : "a first step took " + seconds_text(step);
  record["over_budget"] = step_text + ", so warming up and timing each candidate once "
                          "would take about " + seconds_text(least) + ", over the " +
                          seconds_text(field_or(v, "budget_seconds", 0.0)) + " budget of a measurement (`" +
                          (s.file.empty() ? "dbh tune SCENARIO.yaml" : shell_command(tune)) +
                          "` measures whatever it takes; $DBH_TUNE_BUDGET_S sets the budget)";
  record["over_budget_step_seconds"] = step;
  if (probe > 0) record["over_budget_probe_size"] = probe;
  record["measured_at"] = field_or(v, "measured_at", "");
  record["size"] = field_or(v, "size", int64_t{0});
  record["batch"] = field_or(v, "batch", int64_t{0});
}

// Each candidate's layout, threads and best step time, for a record.
json timings_of(const json& candidates) {
  json timings = json::array();
  for (const auto& c : candidates) {
    timings.push_back({{"channels_last", field_or(c, "channels_last", false)},
                       {"threads", field_or(c, "threads", int64_t{0})},
                       {"best_seconds", best_of(c)}});
  }
  return timings;
}

// Note [A measurement's budget]: the cache entry that says a measurement of
// `s` would take longer than `budget`, from the measuring worker's answer.
json over_budget_verdict(const json& measured, const scenario::Scenario& s, double budget, int64_t cores) {
  const double step = measured["over_budget_step_seconds"].get<double>();
  const auto n = static_cast<double>(measured.contains("candidates") && measured["candidates"].is_array()
                                         ? measured["candidates"].size()
                                         : 1);
  json verdict = {{"over_budget_step_seconds", std::max(step, internal::kMinStepSeconds)},
                  {"least_seconds", 2.0 * n * step},
                  {"budget_seconds", budget},
                  {"cores", cores},
                  {"measured_at", now_iso()},
                  {"size", s.data.size},
                  {"batch", s.data.batch_size}};
  if (measured.contains("over_budget_probe_size") && measured["over_budget_probe_size"].is_number_integer()) {
    verdict["probe_size"] = measured["over_budget_probe_size"];
  }
  return verdict;
}

// Where a setup's measurement is cached and what the cache holds for it.
struct CacheSlot {
  fs::path file;  // empty: not cached (record's cache_note says why)
  std::unique_ptr<internal::FileLock> lock;
  json entry;              // null: to be measured
  std::string source = "measured";
  bool answered = false;   // the record is final (interrupted, or over the budget)
};

CacheSlot look_up(const scenario::Scenario& s, const std::string& key, double budget, int64_t cores, json& record) {
  CacheSlot slot;
  fs::path& file = slot.file;
  json& entry = slot.entry;
  std::error_code ec;
  const std::string root = cache_root();
  if (root.empty()) {
    record["cache_note"] = std::string("not cached: none of $") + kCacheDirEnv + ", $XDG_CACHE_HOME, $HOME is set";
  } else if (!s.data.path.empty() && path_within(root, s.data.path)) {
    // dbh never writes into the user's data.
    record["cache_note"] = "not cached: the cache folder " + root + " lies inside the dataset " + s.data.path;
  } else {
    const fs::path dir = fs::path(root) / "tuning";
    // Never through a link: the cache's entries and locks stay in the cache.
    const bool link = fs::is_symlink(fs::symlink_status(dir, ec));
    if (!link) fs::create_directories(dir, ec);
    if (link || ec || !fs::is_directory(dir)) {
      record["cache_note"] = "not cached: cannot use " + dir.string() + " (from " + cache_root_origin() +
                             "): " + (link ? std::string("a symbolic link, not a folder")
                                           : ec ? ec.message() : std::string("not a folder"));
    } else {
      file = dir / (key + ".json");
      slot.lock = std::make_unique<internal::FileLock>((dir / (key + ".lock")).string());
      if (slot.lock->interrupted()) {
        record["error"] = "interrupted while waiting for another dbh process's measurement";
        slot.answered = true;
        return slot;
      }
      entry = internal::read_cached(file, cores, s.train.channels_last.value_or(false),
                          s.train.threads > 0 ? s.train.threads : cores);
      // A verdict that measuring costs too much holds until the budget
      // allows it or `dbh tune` asks for the measurement.
      if (!entry.is_null() && entry.contains("over_budget_step_seconds")) {
        const double least = entry["least_seconds"].get<double>();
        if (budget <= 0 || least <= budget) {
          record["remeasured"] = budget <= 0 ? "asked to measure whatever it takes (about " + seconds_text(least) + ")"
                                             : "the budget of " + seconds_text(budget) + " now allows the measurement (about " +
                                                   seconds_text(least) + ")";
          entry = nullptr;
        } else {
          note_over_budget(record, entry, s);
          record["over_budget"] = record["over_budget"].get<std::string>() + " (measured " +
                                  entry["measured_at"].get<std::string>() + ")";
          record["cache"] = file.string();
          slot.answered = true;
          return slot;  // PyTorch's defaults
        }
      }
      // Only a measurement taken while no other process competed is an
      // answer; an entry without that reading (an older dbh's) is taken again.
      if (!entry.is_null() && !(entry.contains("others_cores") && entry["others_cores"].is_number() &&
                                entry["others_cores"].get<double>() <= max_others_cores())) {
        record["remeasured"] = "the cached measurement has no reading of other processes' load, or one above " +
                               cores_text(max_others_cores()) + " cores";
        entry = nullptr;
      }
      if (!entry.is_null()) {
        slot.source = "cached";
        record["cache"] = file.string();
      }
    }
  }
  return slot;
}

// Measures the setup into `entry` (and the cache's `file`, when it has one);
// false when the record is final without a choice (an error, over the
// budget, an untrusted load).
bool measure_entry(const scenario::Scenario& s, const std::string& work_dir, double budget, int64_t cores,
                   const fs::path& file, json& entry, json& record) {
  std::error_code ec;
  {
    // Never a silent minute: a measurement takes a few timed steps of
    // every candidate, once per setup.
    std::cerr << "dbh: measuring layout and threads for resnet" << s.model.encoder << "+"
              << model::to_string(s.model.decoder) << " at " << s.data.size << "², batch " << s.data.batch_size
              << " (a few timed steps of each candidate; cached for the next run)" << std::endl;
  }
  const auto t0 = std::chrono::steady_clock::now();
  json measured = measure(s, fs::path(work_dir), budget);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (measured.contains("error")) {
    record["error"] = measured["error"];
    return false;  // PyTorch's defaults, not cached
  }
  fs::remove_all(work_dir, ec);
  if (measured.contains("over_budget_step_seconds") && measured["over_budget_step_seconds"].is_number()) {
    // Note [A measurement's budget]: the verdict is kept like an answer,
    // when the step ran with the cores to itself (Note [A measurement to
    // trust]); else it holds for this run only.
    const double others = measured.contains("others_cores") && measured["others_cores"].is_number()
                              ? measured["others_cores"].get<double>()
                              : -1.0;
    const json verdict = over_budget_verdict(measured, s, budget, cores);
    record.erase("remeasured");  // tried again, and over the budget again
    note_over_budget(record, verdict, s);
    std::cerr << "dbh: not measuring layout and threads: " << record["over_budget"].get<std::string>()
              << "; PyTorch's defaults" << std::endl;
    if (const std::string why = untrusted_load(others, "while the step ran"); !why.empty()) {
      record["cache_note"] = "not cached: " + why;
    } else if (!file.empty()) {
      write_entry(file, verdict, record);
    }
    return false;
  }
  entry = measured;
  entry["measured_at"] = now_iso();
  entry["measure_seconds"] = seconds;
  entry["cores"] = cores;
  const int64_t choice =
      choose_candidate(entry["candidates"], s.train.channels_last.value_or(false),
                       s.train.threads > 0 ? s.train.threads : cores);
  if (choice < 0) {
    record["error"] = "no candidate could be timed";
    return false;
  }
  entry["choice"] = choice;
  // Note [A measurement to trust]: timings taken while other processes
  // kept the cores busy decide nothing that lasts: PyTorch's defaults for
  // this run, nothing cached, measured again next time.
  const double others = entry.contains("others_cores") && entry["others_cores"].is_number()
                            ? entry["others_cores"].get<double>()
                            : -1.0;
  if (const std::string why = untrusted_load(others, "while the candidates were timed"); !why.empty()) {
    record["untrusted"] = why;
    record["others_cores"] = others;
    record["measured_at"] = entry["measured_at"];
    record["measure_seconds"] = seconds;
    record["timings"] = timings_of(entry["candidates"]);
    record["size"] = field_or(entry, "size", int64_t{0});
    record["batch"] = field_or(entry, "batch", int64_t{0});
    record["cores"] = cores;
    return false;  // PyTorch's defaults, not cached
  }
  if (!file.empty()) write_entry(file, entry, record);
  return true;
}

json resolve_uncached_in_process(const scenario::Scenario& s, const std::string& key, const std::string& work_dir,
                                 double budget) {
  const bool auto_layout = !s.train.channels_last.has_value();
  const bool auto_threads = s.train.threads == scenario::TrainConfig::kAutoThreads;
  const int64_t cores = available_cores();
  json record = default_record(s);
  CacheSlot slot = look_up(s, key, budget, cores, record);
  if (slot.answered) return record;
  json& entry = slot.entry;
  const std::string& source = slot.source;
  if (entry.is_null() && !measure_entry(s, work_dir, budget, cores, slot.file, entry, record)) return record;
  const auto& candidates = entry["candidates"];
  const json& chosen = candidates[static_cast<size_t>(entry["choice"].get<int64_t>())];
  if (auto_layout) record["channels_last"] = {{"value", field_or(chosen, "channels_last", false)}, {"source", source}};
  if (auto_threads) record["threads"] = {{"value", field_or(chosen, "threads", cores)}, {"source", source}};
  record["timings"] = timings_of(candidates);
  record["measured_at"] = field_or(entry, "measured_at", "");
  record["measure_seconds"] = field_or(entry, "measure_seconds", 0.0);
  record["size"] = field_or(entry, "size", int64_t{0});
  record["batch"] = field_or(entry, "batch", int64_t{0});
  record["others_cores"] = field_or(entry, "others_cores", -1.0);
  record["cores"] = field_or(entry, "cores", cores);
  return record;
}

}  // namespace

json resolve_measured_choices(scenario::Scenario& s, const std::string& work_dir, MeasureBudget budget) {
  const bool auto_layout = !s.train.channels_last.has_value();
  const bool auto_threads = s.train.threads == scenario::TrainConfig::kAutoThreads;
  // An external worker (Note [The worker contract]) trains the user's own
  // model with its own settings: dbh's layout and threads do not apply.
  if ((!auto_layout && !auto_threads) || s.train.mode != scenario::TrainMode::kTrain || s.worker.external()) return nullptr;
  // A CUDA scenario on a machine without an NVIDIA GPU is skipped: nothing
  // to measure, and no "measuring" line before the skip.
  if (s.hardware.device.rfind("cuda", 0) == 0 && !nvidia_gpu_present()) {
    json record = default_record(s);
    record["cache_note"] = "not measured: this machine has no NVIDIA GPU";
    apply_record(record, s);
    return record;
  }
  // One answer per setup for the whole dbh process: every trial of a run,
  // its repeats and controls, every probe of a search gets the same values,
  // even when the cache changes meanwhile or cannot be written.
  static std::mutex mu;
  static std::map<std::string, json> answered;
  const std::string key = internal::tuning_key(s);
  std::lock_guard<std::mutex> guard(mu);
  if (const auto it = answered.find(key); it != answered.end()) {
    json record = it->second;
    record["reused_in_process"] = true;
    apply_record(record, s);
    return record;
  }
  json record = resolve_uncached_in_process(s, key, work_dir,
                                            budget == MeasureBudget::kKeep ? measure_budget_seconds() : 0.0);
  if (!record.contains("error")) answered[key] = record;
  apply_record(record, s);
  return record;
}

}  // namespace dbh::harness::supervisor
