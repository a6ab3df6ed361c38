#include "harness/bisect/probe.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/report/knowledge_base.h"
#include "harness/report/report.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness {
namespace fs = std::filesystem;

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dbh") : p.string();
}

TrialAnalysis run_scenario_trial(const Scenario& s, const std::string& dir_text, int64_t index,
                                 bool withhold_fault_records, std::string* stderr_tail,
                                 const std::function<void(const Event&)>& on_event) {
  const fs::path dir(dir_text);
  fs::create_directories(dir);
  const fs::path resolved = dir / "scenario.resolved.json";
  write_file_atomically(resolved.string(), resolved_json(s) + "\n");
  TrialSpec spec;
  spec.argv = {self_exe(), "__worker", "--scenario", resolved.string(), "--run-dir", dir.string(),
               "--trial", std::to_string(index)};
  spec.run_dir = dir.string();
  spec.deadline_s = s.limits.deadline_s;
  spec.silence_s = s.limits.silence_s;
  spec.grace_s = s.limits.grace_s;
  spec.on_event = on_event;
  const TrialResult result = run_trial(spec);
  // The trial's own outcome stands, but a run whose raw record is torn is not
  // one to report on.
  if (!result.journal_error.empty()) throw ReportError(result.journal_error);
  ClassifyOptions copts;
  copts.withhold_fault_records = withhold_fault_records;
  if (stderr_tail != nullptr) *stderr_tail = result.stderr_tail;
  return classify(result, s, KnowledgeBase::shipped(), copts);
}

Prober::Prober(std::string scenario_path, std::vector<std::string> base_overrides, std::string out_dir,
               std::string cache_dir, bool quiet)
    : scenario_path_(std::move(scenario_path)),
      base_overrides_(std::move(base_overrides)),
      out_dir_(std::move(out_dir)),
      cache_dir_(std::move(cache_dir)),
      quiet_(quiet) {}

Scenario Prober::load(const std::vector<std::string>& extra) const {
  auto all = base_overrides_;
  all.insert(all.end(), extra.begin(), extra.end());
  return load_scenario(scenario_path_, all);
}

namespace {

Verdict verdict_of(const TrialAnalysis& a) {
  if (a.outcome == Outcome::kUnresolved) return Verdict::kUnknown;
  return is_failure(a.outcome) ? Verdict::kFail : Verdict::kPass;
}

nlohmann::json summary_json(const ProbeResult& p) {
  const auto& a = p.analysis;
  return {{"outcome", to_string(a.outcome)},
          {"class", a.failure.klass},
          {"step", a.failure.step ? nlohmann::json(*a.failure.step) : nlohmann::json(nullptr)},
          {"module", a.failure.module},
          {"message", a.failure.message},
          {"steps_completed", a.steps_completed},
          {"seconds", p.seconds}};
}

bool load_summary(const fs::path& path, ProbeResult* p) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    const auto j = nlohmann::json::parse(in);
    auto& a = p->analysis;
    a.outcome = outcome_from_string(j.value("outcome", "unresolved")).value_or(Outcome::kUnresolved);
    a.failure.klass = j.value("class", "");
    if (!j["step"].is_null()) a.failure.step = j["step"].get<int64_t>();
    a.failure.module = j.value("module", "");
    a.failure.message = j.value("message", "");
    a.steps_completed = j.value("steps_completed", int64_t{0});
    p->seconds = j.value("seconds", 0.0);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

ProbeResult Prober::run(const std::vector<std::string>& extra, const std::string& what, bool use_cache,
                        int64_t repetition) {
  const Scenario s = load(extra);
  ProbeResult p;
  p.index = static_cast<int64_t>(history_.size()) + 1;
  p.what = what;
  p.overrides = extra;
  p.hash = scenario_hash(s);
  const fs::path cache_file = fs::path(cache_dir_) / (p.hash + ".json");
  if (use_cache) {
    if (const auto it = cache_.find(p.hash); it != cache_.end()) {
      p.analysis = it->second.analysis;
      p.seconds = it->second.seconds;
      p.cached = true;
    } else if (!cache_dir_.empty() && load_summary(cache_file, &p)) {
      p.cached = true;
    }
  }
  if (!p.cached) {
    p.dir = (fs::path(out_dir_) / "probes" / ("probe-" + std::to_string(p.index))).string();
    const auto t0 = std::chrono::steady_clock::now();
    p.analysis = run_scenario_trial(s, p.dir, 1000 + p.index, false, nullptr, {});
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!cache_dir_.empty() && repetition == 0) {
      std::error_code ec;
      fs::create_directories(cache_dir_, ec);
      if (!ec) write_file_atomically(cache_file.string(), summary_json(p).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
  }
  p.verdict = verdict_of(p.analysis);
  cache_[p.hash] = p;
  history_.push_back(p);
  if (!quiet_) {
    std::ostringstream line;
    line << "  probe " << std::setw(2) << p.index << "  " << std::left << std::setw(44) << what << std::right
         << "  " << std::setw(9) << to_string(p.analysis.outcome);
    if (!p.analysis.failure.klass.empty()) line << " " << p.analysis.failure.klass;
    if (p.analysis.failure.step) line << " @step " << *p.analysis.failure.step;
    line << "  " << std::fixed << std::setprecision(1) << p.seconds << " s" << (p.cached ? " (cached)" : "");
    std::cout << line.str() << std::endl;
  }
  return p;
}

ProbeResult Prober::probe(const std::vector<std::string>& extra, const std::string& what) {
  return run(extra, what, /*use_cache=*/true, 0);
}

ProbeResult Prober::probe_repeated(const std::vector<std::string>& extra, const std::string& what, int64_t k) {
  ProbeResult last;
  for (int64_t i = 0; i < k; ++i) {
    last = run(extra, what + (k > 1 ? " [" + std::to_string(i + 1) + "/" + std::to_string(k) + "]" : ""),
               /*use_cache=*/false, i);
    if (last.verdict == Verdict::kFail) return last;
  }
  return last;
}

}  // namespace dbh::harness
