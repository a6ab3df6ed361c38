#include "harness/probe/probe.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/json_fields.h"
#include "harness/common/progress.h"
#include "harness/common/text.h"
#include "harness/probe/cluster.h"
#include "harness/supervisor/judge.h"
#include "harness/supervisor/outcome.h"
#include "harness/kb/knowledge_base.h"
#include "harness/proto/event_types.h"
#include "harness/report/report.h"
#include "harness/supervisor/scenario_trial.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::probe {
namespace fs = std::filesystem;

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kFail: return "fails";
    case Verdict::kUnknown: return "unknown";
    case Verdict::kDifferent: return "different failure";
  }
  return "unknown";
}

namespace {

// In a bisection's session folder while the command runs.
constexpr const char* kSessionRunning = ".running";

int64_t remove_weights(const fs::path& dir);

}  // namespace

// ---------------------------------------------------------------------------

Prober::Prober(std::string scenario_path, std::vector<std::string> base_overrides, std::string out_dir,
               std::string cache_dir, bool quiet, scenario::InputChecks checks)
    : scenario_path_(std::move(scenario_path)),
      base_overrides_(std::move(base_overrides)),
      checks_(std::move(checks)),
      out_dir_(std::move(out_dir)),
      cache_dir_(std::move(cache_dir)),
      quiet_(quiet) {
  if (const char* mib = std::getenv("DBH_PROBE_CACHE_MIB"); mib != nullptr && *mib != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(mib, &end, 10);
    if (end == mib || *end != '\0' || v < 0 || errno != 0 || v > (int64_t{1} << 40)) {
      throw UsageError(std::string("DBH_PROBE_CACHE_MIB: expected a whole number of MiB (0 or more), got \"") +
                       mib + "\"");
    }
    cache_cap_bytes_ = static_cast<int64_t>(v) << 20;
  }
  // A new command in this (claimed) folder supersedes an earlier one's
  // interruption record: left there, it would say this command was cut short.
  std::error_code ec;
  if (!out_dir_.empty()) fs::remove(fs::path(out_dir_) / "interrupted.json", ec);
  if (!out_dir_.empty()) release_abandoned_sessions();
}

Prober::~Prober() {
  try {
    end_ahead();
    if (!keep_checkpoints_) release_checkpoints();
    if (!session_dir_.empty()) fs::remove(fs::path(session_dir_) / kSessionRunning);
  } catch (const std::exception&) {
    // Never throw from a destructor; what is left is under the probe folders.
  }
}

// A bisection killed outright (SIGKILL, the machine lost) never releases its
// probes' checkpoints: its session folder still holds kSessionRunning. The
// folder is claimed by this command now, so no other one runs in it: their
// checkpoints and dataset copies go (the rest, logs and reports, stays). A
// session that ended keeping its checkpoints (--keep-checkpoints) has no
// marker and is left as it is.
void Prober::release_abandoned_sessions() {
  std::error_code ec;
  const fs::path parent = fs::path(out_dir_) / "probes";
  for (const auto& session : fs::directory_iterator(parent, ec)) {
    std::error_code ec2;
    if (!session.is_directory(ec2) || session.is_symlink(ec2)) continue;
    if (!fs::is_regular_file(fs::symlink_status(session.path() / kSessionRunning, ec2))) continue;
    for (const auto& probe : fs::directory_iterator(session.path(), ec2)) {
      std::error_code ec3;
      if (probe.is_directory(ec3) && !probe.is_symlink(ec3)) remove_weights(probe.path());
    }
    fs::remove(session.path() / kSessionRunning, ec2);
  }
}

const std::string& Prober::session_dir() {
  if (!session_dir_.empty()) return session_dir_;
  const fs::path parent = fs::path(out_dir_) / "probes";
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw ReportError(parent.string() + ": expected a folder for the probes, got: " + ec.message());
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char rnd[9];
    std::snprintf(rnd, sizeof rnd, "%08x", static_cast<unsigned>(rd()));
    const fs::path dir = parent / (timestamp_compact() + "-" + std::to_string(::getpid()) + "-" + rnd);
    // mkdir, not create_directories: it fails when the folder exists, so no
    // two bisections ever share one.
    if (::mkdir(dir.c_str(), 0755) == 0) {
      session_dir_ = dir.string();
      // Until this command ends: see release_abandoned_sessions.
      std::ofstream(dir / kSessionRunning) << ::getpid() << "\n";
      return session_dir_;
    }
    if (errno != EEXIST) {
      throw ReportError(dir.string() + ": expected to create the bisection's probe folder, got: " +
                        std::strerror(errno));
    }
  }
  throw ReportError(parent.string() + ": expected a free name for this bisection's probe folder, found none");
}

std::string Prober::cache_key(const scenario::Scenario& s) const { return probe_key(s); }

scenario::Scenario Prober::load(const std::vector<std::string>& extra) const {
  auto all = base_overrides_;
  all.insert(all.end(), extra.begin(), extra.end());
  return scenario::load_scenario(scenario_path_, all, checks_);
}

namespace {

// Note [Metric expectations in bisection]: "it trains but learns nothing"
// is a failure to bisect like a crash (which learning rate stops the h-mean
// from rising, which configuration difference costs 20 % of the loss drop,
// which change raised the peak memory). A trial that passed but misses the
// scenario's metric expectations becomes a failure of its own class.
void judge_metric_expectations(const scenario::Expectation& e, supervisor::TrialAnalysis* a) {
  if (a->outcome != scenario::Outcome::kPassed) return;
  const supervisor::Judgement j = supervisor::judge(e, supervisor::evidence_of(*a), supervisor::ExpectScope::kMetrics);
  if (j.met()) return;
  const std::vector<std::string>& why = j.why;
  a->outcome = scenario::Outcome::kFailed;
  a->failure.klass = "metric_expectation_unmet";
  std::string message;
  for (const auto& w : why) message += (message.empty() ? "" : "; ") + w;
  a->failure.message = message;
  a->failure.evidence = why;
}

Verdict verdict_of(const supervisor::TrialAnalysis& a) {
  // Not a result: a trial cut short, or one this machine could not run (a
  // device it lacks) says nothing about the failure.
  if (a.outcome == scenario::Outcome::kUnresolved || a.outcome == scenario::Outcome::kSkipped) return Verdict::kUnknown;
  return supervisor::is_failure(a.outcome) ? Verdict::kFail : Verdict::kPass;
}

nlohmann::json summary_json(const ProbeResult& p) {
  const auto& a = p.analysis;
  return {{"outcome", to_string(a.outcome)},
          {"class", a.failure.klass},
          {"step", a.failure.step ? nlohmann::json(*a.failure.step) : nlohmann::json(nullptr)},
          {"module", a.failure.module},
          {"message", a.failure.message},
          {"steps_completed", a.steps_completed},
          {"ops_steps", a.ops_steps},
          {"peak_memory_bytes", a.peak_memory_bytes},
          {"memory_known", a.memory_known},
          {"max_step_peak_bytes", a.max_step_peak_bytes},
          {"seconds", p.seconds}};
}

}  // namespace

bool read_probe_record(const std::string& path, const std::string& key, ProbeResult* p, size_t max_bytes,
                       nlohmann::json* record) {
  // A cache entry someone replaced (a FIFO, a huge file) is no answer, and
  // never a hang: the probe runs again.
  const auto text = read_regular_file(path, max_bytes);
  if (!text) return false;
  try {
    auto j = nlohmann::json::parse(*text);
    if (field_or(j, "key", "") != key) return false;  // another format or a torn file
    // An entry without the memory a qualification fits (an older format) is
    // no answer: the probe runs again.
    if (!j.contains("peak_memory_bytes") || !j["peak_memory_bytes"].is_number_integer() || !j.contains("ops_steps") ||
        !j.contains("max_step_peak_bytes") || !j["max_step_peak_bytes"].is_number_integer()) {
      return false;
    }
    auto& a = p->analysis;
    a.outcome = scenario::outcome_from_string(field_or(j, "outcome", "unresolved")).value_or(scenario::Outcome::kUnresolved);
    a.failure.klass = field_or(j, "class", "");
    if (!j["step"].is_null()) a.failure.step = j["step"].get<int64_t>();
    a.failure.module = field_or(j, "module", "");
    a.failure.message = field_or(j, "message", "");
    a.steps_completed = field_or(j, "steps_completed", int64_t{0});
    a.ops_steps = field_or(j, "ops_steps", int64_t{0});
    a.peak_memory_bytes = j["peak_memory_bytes"].get<int64_t>();
    a.memory_known = field_or(j, "memory_known", false);
    a.max_step_peak_bytes = j["max_step_peak_bytes"].get<int64_t>();
    p->seconds = field_or(j, "seconds", 0.0);
    if (record != nullptr) *record = std::move(j);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

// Whether the file system holding `dir` is (nearly) full: "" when it is not,
// else why.
std::string disk_full(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return "";
  const auto free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  if (free_bytes >= kDiskFullBelowBytes) return "";
  return "expected a trial the disk could hold, got a full disk (" + scenario::format_bytes(free_bytes) + " free on the file "
         "system of " + dir + " after the worker failed); free some space and run again";
}

// Checkpoints and private dataset copies in a probe folder: what takes disk
// and is not needed once the probe is over. Returns the bytes removed.
int64_t remove_weights(const fs::path& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code ec2;
    if (name.rfind("checkpoint-", 0) == 0 && e.is_regular_file(ec2)) {
      doomed.push_back(e.path());
    } else if (name == "data" && e.is_directory(ec2) && !e.is_symlink(ec2)) {
      doomed.push_back(e.path());  // a corrupt_sample fault's private dataset copy
    }
  }
  for (const auto& p : doomed) {
    std::error_code ec2;
    if (fs::is_directory(p, ec2)) {
      for (const auto& f : fs::recursive_directory_iterator(p, ec2)) {
        std::error_code ec3;
        if (f.is_regular_file(ec3)) bytes += static_cast<int64_t>(f.file_size(ec3));
      }
      fs::remove_all(p, ec2);
    } else {
      bytes += static_cast<int64_t>(fs::file_size(p, ec2));
      fs::remove(p, ec2);
    }
  }
  return bytes;
}

}  // namespace

std::string record_text(const nlohmann::json& record) {
  return record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json probe_record(const ProbeResult& p) {
  auto j = summary_json(p);
  j["key"] = p.key;
  j["scenario_hash"] = p.hash;
  return j;
}

ProbeTrial run_probe_trial(const scenario::Scenario& s, const std::string& dir, int64_t trial,
                           const std::function<void(const proto::Event&)>& on_event) {
  supervisor::ScenarioTrial t = supervisor::run_classified_trial(s, dir, trial, false, on_event);
  ProbeTrial out;
  // A worker that filled the disk may have had no room left to say so (its
  // stderr and events live there too): a trial that did not pass on a full
  // disk is the disk's failure, not the training's. Looked at before its
  // weights are removed.
  out.infrastructure = infrastructure_failure(t.result, t.analysis);
  if (out.infrastructure.empty() && verdict_of(t.analysis) != Verdict::kPass) out.infrastructure = disk_full(dir);
  out.analysis = std::move(t.analysis);
  return out;
}

int64_t Prober::release_checkpoints() {
  int64_t bytes = 0;
  for (const auto& dir : checkpoint_dirs_) bytes += remove_weights(dir);
  checkpoint_dirs_.clear();
  return bytes;
}

void Prober::stop_if_requested(const ProbeResult* in_flight) {
  const int sig = supervisor::stop_requested();
  if (sig == 0) return;
  if (ahead_slot_ > 0) throw supervisor::Interrupted(sig);  // a process ahead: its Prober records the stop
  const supervisor::Interrupted stop(sig);
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["interrupted"] = supervisor::signal_name(sig);
  j["exit_code"] = stop.exit_code();
  j["scenario"] = scenario_path_;
  j["overrides"] = base_overrides_;
  j["probes"] = nlohmann::ordered_json::array();
  for (const auto& p : history_) {
    nlohmann::ordered_json e = {{"index", p.index}, {"what", p.what}, {"config", p.overrides}};
    const auto summary = summary_json(p);  // items() must not outlive its object
    for (const auto& [k, v] : summary.items()) e[k] = v;
    e["cached"] = p.cached;
    e["dir"] = p.dir;
    j["probes"].push_back(e);
  }
  // The trial the stop cut short: its folder has its logs, it has no outcome.
  j["in_flight"] = in_flight == nullptr
                       ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json{{"index", in_flight->index}, {"what", in_flight->what},
                                                {"config", in_flight->overrides}, {"dir", in_flight->dir}};
  const fs::path record = fs::path(out_dir_) / "interrupted.json";
  try {
    write_file_atomically(record.string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    std::cerr << "interrupted by " << supervisor::signal_name(sig) << " after " << history_.size()
              << " probe(s): " << record.string() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "interrupted by " << supervisor::signal_name(sig) << " after " << history_.size()
              << " probe(s); cannot write " << record.string() << ": " << e.what() << std::endl;
  }
  throw stop;
}

void Prober::store(const ProbeResult& p, const std::string& cache_file) {
  if (cache_dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(cache_dir_, ec);
  if (ec) throw ReportError(cache_dir_ + ": expected a folder for the probe cache, got: " + ec.message());
  // The cache directory tag (bford.info/cachedir): backup tools skip the
  // folder, and so does the listing of a training's source tree (Note [The
  // training's code is an input]) when the cache lies inside it.
  const fs::path tag = fs::path(cache_dir_) / "CACHEDIR.TAG";
  if (!fs::exists(fs::symlink_status(tag, ec))) {
    try {
      write_file_atomically(tag.string(), "Signature: 8a477f597d28d172789f06886806bc55\n"
                                          "# The probe cache of dbh: results it can measure again.\n");
    } catch (const std::exception&) {
      // Only a hint to other tools: the cache works without it.
    }
  }
  write_file_atomically(cache_file, record_text(probe_record(p)));
  trim_probe_cache(cache_dir_, cache_cap_bytes_);
}

int run_search(std::optional<OutputDir>& claim, const std::function<int()>& body) {
  supervisor::install_stop_handlers();
  try {
    return body();
  } catch (const supervisor::Interrupted& e) {
    // The partial answer stays; a search stopped before it wrote anything
    // leaves the folder as it found it (a previous run's outputs put back).
    if (claim && claim->holds_new_output()) claim->commit();
    return e.exit_code();
  } catch (const UsageError& e) {
    std::cerr << "dbh: " << e.what() << "\n";
    return 2;
  } catch (const NotRunHere& e) {
    // Nothing it wrote is an answer: the claim is undone.
    std::cerr << "dbh: not run here: " << one_line(e.what()) << "\n";
    return kNotRunHereExit;
  }
}

std::string probe_progress(int64_t index, const std::string& what, int64_t steps_done, int64_t steps_total,
                           double seconds) {
  std::ostringstream line;
  line << "  probe " << std::setw(2) << index << "  " << one_line(what) << "  running: ";
  if (steps_done > 0) line << "step " << steps_done << "/" << steps_total << ", ";
  line << static_cast<int64_t>(seconds) << " s";
  return line.str();
}

ProbeResult Prober::run(const std::vector<std::string>& extra, const std::string& what, bool use_cache,
                        bool keep_checkpoints) {
  stop_if_requested(nullptr);
  const scenario::Scenario s = load(extra);
  ProbeResult p;
  p.index = static_cast<int64_t>(history_.size()) + 1;
  p.what = what;
  p.overrides = extra;
  p.hash = scenario::scenario_hash(s);
  const InputManifest inputs = input_manifest(s);
  p.key = key_of(inputs);
  // Note [The training's code is an input]: inputs that could not all be
  // listed are never answered from the cache, nor stored in it.
  const bool cacheable = inputs.not_cacheable.empty();
  if (!cacheable) {
    use_cache = false;
    if (!quiet_ && !said_not_cacheable_) std::cout << "  (probes are not cached: " << inputs.not_cacheable << ")\n";
    said_not_cacheable_ = true;
  }
  p.fresh = !use_cache;
  const fs::path cache_file = fs::path(cache_dir_) / (p.key + ".json");
  // Note [Probes ahead, in parallel]: run by a process ahead, answered from
  // what it stored.
  if (std::string dir; !keep_checkpoints && wait_ahead(ahead_key(p.key, !use_cache), what, &dir) &&
                       read_probe_record(cache_file.string(), p.key, &p)) {
    p.parallel = true;
    p.dir = dir;
  }
  if (use_cache && !p.parallel) {
    if (const auto it = cache_.find(p.key); it != cache_.end()) {
      p.analysis = it->second.analysis;
      p.seconds = it->second.seconds;
      p.cached = true;
      p.cached_from = it->second.dir;
    } else if (!cache_dir_.empty() && read_probe_record(cache_file.string(), p.key, &p)) {
      p.cached = true;
    }
  }
  if (!p.cached && !p.parallel) {
    p.dir = (fs::path(session_dir()) /
             (ahead_slot_ > 0 ? "ahead-" + std::to_string(ahead_slot_) : "probe-" + std::to_string(p.index)))
                .string();
    const auto t0 = std::chrono::steady_clock::now();
    // Note [A probe never runs in silence].
    const int64_t steps_total = s.train.last_step();
    int64_t steps_done = 0;
    std::optional<ProgressLine> line;
    if (!quiet_) line.emplace(std::cout, isatty(STDOUT_FILENO) != 0, 0.0);
    auto on_event = [&](const proto::Event& e) {
      if (!line) return;
      if (e.type == proto::event::kStepEnd) steps_done = std::max(steps_done, proto::step_end_from(e).step + 1);
      line->show(probe_progress(p.index, what, steps_done, steps_total, line->seconds()));
    };
    const int64_t trial = ahead_slot_ > 0 ? 5000 + ahead_slot_ : 1000 + p.index;
    ProbeTrial t;
    if (const ClusterOptions* cluster = Cluster::active()) {  // Note [Probes on a cluster]
      t = run_remotely(*cluster, s, p, trial, line ? &*line : nullptr, on_event);
    } else {
      t = run_probe_trial(s, p.dir, trial, on_event);
    }
    if (line) line->finish();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string& why = t.infrastructure;
    // Weights stay only where later probes resume from them, whatever
    // happens next.
    if (keep_checkpoints) {
      checkpoint_dirs_.push_back(p.dir);
    } else {
      remove_weights(p.dir);
    }
    // Stopped mid-trial: the worker was killed, so its outcome is no result
    // to cache or to search on.
    stop_if_requested(&p);
    if (!why.empty()) {
      throw ProbeInfrastructureError("probe " + std::to_string(p.index) + " (" + what + ", " + p.dir + "): " + why +
                                     "; the probe was neither cached nor counted");
    }
    p.analysis = std::move(t.analysis);
    if (judge_metrics_) judge_metric_expectations(s.expect, &p.analysis);
  }
  p.verdict = verdict_of(p.analysis);
  // An undecided trial (the harness could not tell) is no answer to reuse.
  if (!p.cached && p.verdict != Verdict::kUnknown && cacheable) {
    cache_[p.key] = p;
    if (!p.parallel) store(p, cache_file.string());
  }
  history_.push_back(p);
  if (!quiet_) {
    std::ostringstream line;
    line << "  probe " << std::setw(2) << p.index << "  " << std::left << std::setw(44) << what << std::right
         << "  " << std::setw(9) << to_string(p.analysis.outcome);
    if (!p.analysis.failure.klass.empty()) line << " " << p.analysis.failure.klass;
    if (p.analysis.failure.step) line << " @step " << *p.analysis.failure.step;
    line << "  " << std::fixed << std::setprecision(1) << p.seconds << " s"
         << (p.cached ? " (cached)" : p.parallel ? " (ran ahead)" : p.fresh ? " (fresh)" : "");
    std::cout << line.str() << std::endl;
  }
  // The search's first trial is its question (the reproduction, the full
  // run, the source setup): when this machine cannot run it, every answer
  // built on it would be made of trials that never ran.
  if (history_.size() == 1 && p.analysis.outcome == scenario::Outcome::kSkipped) throw NotRunHere(p.analysis.failure.message);
  return p;
}

std::string Prober::key_of(const InputManifest& inputs) const {
  // Note [Probes on a cluster]: measured there, an answer of its own.
  const ClusterOptions* cluster = Cluster::active();
  return probe_key(inputs, cluster == nullptr ? "" : cluster_key_text(*cluster)) + (judge_metrics_ ? "-metrics" : "");
}

ProbeResult Prober::probe(const std::vector<std::string>& extra, const std::string& what) {
  return run(extra, what, /*use_cache=*/true, /*keep_checkpoints=*/false);
}

ProbeResult Prober::probe_fresh(const std::vector<std::string>& extra, const std::string& what) {
  return run(extra, what, /*use_cache=*/false, /*keep_checkpoints=*/false);
}

ProbeResult Prober::probe_keeping_checkpoints(const std::vector<std::string>& extra, const std::string& what) {
  return run(extra, what, /*use_cache=*/false, /*keep_checkpoints=*/true);
}

}  // namespace dbh::harness::probe
