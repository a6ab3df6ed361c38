#include "harness/bisect/bisect_command.h"

#include <chrono>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "harness/bisect/parts.h"
#include "harness/common/json_fields.h"
#include "harness/probe/cluster.h"
#include "harness/probe/probe.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::bisect {

std::string to_string(BisectKind kind) { return kBisectKindNames[static_cast<size_t>(kind)]; }

namespace fs = std::filesystem;

int bisect_command(const BisectOptions& o, BisectAnswer* answer) {
  const auto t0 = std::chrono::steady_clock::now();
  // The output folder: locked while the bisection writes it, and what the
  // bisection created of it removed unless it ends with an answer (or an
  // interruption, whose interrupted.json stays).
  std::optional<OutputDir> claim;
  return probe::run_search(claim, [&]() -> int {
    if (o.replay_from_start && o.kind != BisectKind::kSteps && o.kind != BisectKind::kModules) {
      throw UsageError("bisect " + to_string(o.kind) + ": --replay-from-start: expected kind steps or modules (only they replay)");
    }
    // Flags another kind reads: given here they would be silently ignored.
    const auto refuse = [&](bool given, const char* flag, const char* kinds) {
      if (given) throw UsageError("bisect " + to_string(o.kind) + ": " + flag + ": expected kind " + kinds + " (only it reads " +
                                  flag + "), got kind " + to_string(o.kind));
    };
    if (o.kind != BisectKind::kConfig) {
      refuse(!o.good.empty(), "--good", "config");
      refuse(!o.bad.empty(), "--bad", "config");
    }
    if (o.kind != BisectKind::kRange) {
      refuse(!o.key.empty(), "--key", "range");
      refuse(!o.lo.empty(), "--lo", "range");
      refuse(!o.hi.empty(), "--hi", "range");
    }
    const std::string name = o.scenario.empty() ? "config" : fs::path(o.scenario).stem().string();
    std::vector<std::string> datasets;  // the scenario's dataset folders, never written into
    if (!o.scenario.empty()) {
      const scenario::Scenario s = scenario::load_scenario(o.scenario, o.overrides, o.checks);  // validate first
      probe::Cluster::take_scenario_defaults(s.cluster);  // Note [Probes on a cluster]
      datasets = scenario::dataset_folders(s);
      // What this kind asks of the training, refused before anything runs
      // when the scenario's own worker cannot serve it.
      std::vector<std::pair<std::string, std::string>> needs;
      const std::string what = "dbh bisect " + to_string(o.kind);
      if (o.kind == BisectKind::kSteps || o.kind == BisectKind::kModules) {
        needs.emplace_back(supervisor::capability::kStopAfter, what);
        if (!o.replay_from_start) {
          needs.emplace_back(supervisor::capability::kCheckpoint, what);
          needs.emplace_back(supervisor::capability::kResume, what);
        }
      }
      if (o.kind == BisectKind::kModules) needs.emplace_back(supervisor::capability::kMonitorsLocalise, what);
      if (o.kind == BisectKind::kData) needs.emplace_back(supervisor::capability::kSubset, what);
      for (const auto& note : supervisor::check_worker(s, needs)) std::cerr << what << ": note: " << one_line(note) << "\n";
    }
    const fs::path out = o.out.empty() ? fs::path(default_output_folder("bisect-" + to_string(o.kind) + "-" + name)) : fs::path(o.out);
    check_outside_datasets("dbh bisect", "--out", out.string(), datasets);
    check_outside_datasets("dbh bisect", "--cache", o.cache_dir.empty() ? default_probe_cache() : o.cache_dir, datasets);
    // Continued, not replaced: each bisection keeps its probes in its own
    // session folder (probes/<session>), and a kept reproduction's
    // checkpoints (--keep-checkpoints) stay for the repro commands that name
    // them; the top-level reports are the latest bisection's.
    claim.emplace(out,
                  "bisect " + to_string(o.kind) + " " +
                      (o.scenario.empty() ? std::string("config")
                                          : fs::absolute(o.scenario).lexically_normal().string()),
                  OutputDir::Reuse::kContinue);
    const std::string cache = o.cache_dir.empty() ? default_probe_cache() : o.cache_dir;
    BisectOptions opts = o;
    opts.cache_dir = cache;
    std::unique_ptr<probe::Prober> prober;
    if (o.kind != BisectKind::kConfig) {
      prober = std::make_unique<probe::Prober>(o.scenario, o.overrides, out.string(), cache, o.quiet, o.checks);
      prober->set_keep_checkpoints(o.keep_checkpoints);
      // A range or configuration can fail by learning too little as well as
      // by crashing (Note [Metric expectations in bisection]).
      prober->set_judge_metrics(o.kind == BisectKind::kRange);
      prober->set_jobs(o.jobs);
    }
    if (!o.quiet) {
      // config may have no scenario of its own: then what it compares.
      const std::string subject = !o.scenario.empty() || o.kind != BisectKind::kConfig
                                      ? o.scenario
                                      : "good " + join(o.good, " ") + ", bad " + join(o.bad, " ");
      std::cout << "dbh bisect " << to_string(o.kind) << ": " << one_line(subject) << std::endl;
    }
    Outputs result;
    if (o.kind == BisectKind::kSteps) {
      result = bisect_steps(*prober, opts);
    } else if (o.kind == BisectKind::kModules) {
      result = bisect_modules(*prober, opts);
    } else if (o.kind == BisectKind::kData) {
      result = bisect_data(*prober, opts);
    } else if (o.kind == BisectKind::kConfig) {
      result = bisect_config(opts, prober, out);
    } else if (o.kind == BisectKind::kRange) {
      result = bisect_range(*prober, opts);
    } else {
      throw ScenarioError("bisect: expected steps, modules, data, config or range, got " + to_string(o.kind));
    }
    // The search is done: only events and logs stay behind.
    const int64_t removed = prober->keep_checkpoints() ? 0 : prober->release_checkpoints();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int code = finish(result, *prober, out, seconds, removed);
    claim->commit();
    if (answer != nullptr) {
      answer->kind = result.kind;
      answer->confident = result.confident();
      answer->confirmed = result.confirmed;
      answer->confidence = result.confidence;
      answer->doubts = result.doubts;
      answer->summary = result.summary;
      answer->repro = result.repro;
      answer->method = result.result.is_object() ? field_or(result.result, "method", std::string()) : std::string();
      answer->before_training = result.result.is_object() && field_or(result.result, "before_training", false);
      if (result.result.is_object() && result.result.contains("samples") && result.result["samples"].is_array()) {
        for (const auto& smp : result.result["samples"]) answer->samples.push_back(field_or(smp, "index", int64_t{0}));
      }
      if (result.result.is_object() && result.result.contains("difference") && result.result["difference"].is_array()) {
        for (const auto& d : result.result["difference"]) {
          if (d.is_string()) answer->difference.push_back(d.get<std::string>());
        }
      }
    }
    return code;
  });
}

}  // namespace dbh::harness::bisect
