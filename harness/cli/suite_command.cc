// `dbh suite`: the scenarios of folders and files, planned before anything
// runs (validation, sharding, the journal a resumed suite continues), each
// run as `dbh run` runs it (run_scenario.h), and the suite's outputs.
#include "harness/cli/run_command.h"
#include "harness/common/environment_vars.h"
#include "harness/cli/run_scenario.h"
#include "harness/cli/suite_outputs.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <set>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "harness/common/json_fields.h"
#include "harness/probe/probe.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/env/environment.h"
#include "harness/report/ci_conventions.h"
#include "harness/kb/knowledge_base.h"
#include "harness/proto/event_types.h"
#include "harness/report/report.h"
#include "harness/report/run_files.h"
#include "harness/run/run_verdict.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/shard.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

namespace {

// What a suite runs, decided before anything runs.
struct SuitePlan {
  std::vector<std::string> files;                  // the scenario files this shard runs, in order
  std::vector<std::string> data_paths;             // each scenario's dataset folder, never written into
  std::vector<std::string> inputs;                 // every file and folder the scenarios read (input_paths)
  std::map<std::string, std::string> hash_of;      // file -> hash of its resolved scenario (overrides applied)
  std::map<std::string, probe::InputManifest> inputs_of;  // file -> what else decides its outcome, as now
  std::map<std::string, std::string> ids_of;       // file -> its id in the suite
  std::optional<supervisor::Shard> shard;
  std::string suite_hash;  // every scenario's id and configuration, before sharding
};

// The suite's scenarios from the folders and files given (a file named twice
// runs once; a file another one includes is a shared base, not a scenario),
// each valid with the overrides before anything runs, and the shard this
// invocation runs. Throws ScenarioError for bad input.
SuitePlan plan_suite(const RunOptions& o) {
  SuitePlan p;
  p.files = expand_scenarios(o.scenarios);
  if (p.files.empty()) {
    std::string where;
    for (const auto& in : o.scenarios) where += (where.empty() ? "" : ", ") + in;
    throw ScenarioError("dbh suite: expected at least one scenario (*.yaml) in " + where + ", got none");
  }
  // The same file named twice runs once.
  std::set<std::string> seen;
  std::vector<std::string> unique;
  for (const auto& f : p.files) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(f, ec).string();
    if (seen.insert(ec ? f : key).second) unique.push_back(f);
  }
  p.files = unique;
  // A file another scenario of the suite includes is an include file (a
  // shared base), not a scenario: a glob over a folder names both.
  {
    std::map<std::string, std::string> included_by;  // canonical path → a file that includes it
    for (const auto& f : p.files) {
      std::error_code ec;
      const fs::path self = fs::weakly_canonical(f, ec);
      std::vector<std::string> closure;
      try {
        closure = scenario::scenario_files(f);
      } catch (const ScenarioError&) {
        continue;  // load_scenario below says what is wrong with it
      }
      for (const auto& inc : closure) {
        const fs::path canon = fs::weakly_canonical(inc, ec);
        if (!ec && canon != self) included_by.emplace(canon.string(), f);
      }
    }
    std::vector<std::string> scenarios;
    for (const auto& f : p.files) {
      std::error_code ec;
      const auto it = included_by.find(fs::weakly_canonical(f, ec).string());
      if (it == included_by.end()) {
        scenarios.push_back(f);
      } else {
        std::cerr << "dbh suite: " << one_line(f) << " is not run as a scenario: " << one_line(it->second)
                  << " includes it\n";
      }
    }
    p.files = scenarios;
    if (p.files.empty()) throw ScenarioError("dbh suite: expected at least one scenario, got only include files");
  }
  for (const auto& f : p.files) {  // all valid before anything runs
    const scenario::Scenario s = scenario::load_scenario(f, o.overrides, worker::input_checks());
    // An external worker is asked what it serves, as `dbh run` asks: a
    // scenario it cannot serve is refused before anything runs, never run and
    // blamed on the training.
    try {
      for (const auto& note : supervisor::check_worker(s)) {
        std::cerr << "dbh suite: note: " << one_line(f) << ": " << one_line(note) << "\n";
      }
    } catch (const UsageError& e) {
      throw UsageError(f + ": " + e.what());
    }
    for (const auto& d : scenario::dataset_folders(s)) p.data_paths.push_back(d);
    for (const auto& in : scenario::input_paths(s)) p.inputs.push_back(in);
    p.hash_of[f] = scenario::scenario_hash(s);
    p.inputs_of[f] = probe::input_manifest(s);
  }
  if (o.shard_count > 0 && !o.shard.empty()) {
    throw ScenarioError("--shard-count: expected either --shard K/N or --shard-count (with JOB_COMPLETION_INDEX), "
                        "got both");
  }
  const auto env = supervisor::process_environment();
  if (o.shard_count > 0 && env.count("JOB_COMPLETION_INDEX") == 0) {
    // Without the index the count names no shard: running the whole suite
    // where a part was meant would be silently wrong.
    throw ScenarioError("--shard-count: expected JOB_COMPLETION_INDEX set (a Kubernetes indexed Job), got it "
                        "unset; use --shard K/N elsewhere");
  }
  p.shard = o.shard.empty() ? supervisor::detect_shard(env, o.shard_count) : supervisor::parse_shard(o.shard);
  p.ids_of = scenario_ids(p.files);
  // The whole suite (every scenario's id and resolved configuration, before
  // sharding): merge checks that its shards all ran the same one.
  {
    std::vector<std::string> parts;
    for (const auto& f : p.files) parts.push_back(p.ids_of.at(f) + "=" + p.hash_of.at(f));
    std::sort(parts.begin(), parts.end());
    Fnv1a64 h;
    for (const auto& part : parts) h.update(part + "\n");
    p.suite_hash = h.hex();
  }
  if (p.shard) {
    std::vector<std::string> mine;
    for (const auto& f : p.files) {
      if (supervisor::in_shard(p.ids_of.at(f), *p.shard)) mine.push_back(f);
    }
    p.files = mine;
  }
  return p;
}

}  // namespace

namespace {

// --print-config: each scenario this shard would run, by suite id, as it
// would run.
int print_suite_config(const RunOptions& o, const SuitePlan& plan) {
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (const auto& f : plan.files) {
    all[plan.ids_of.at(f)] =
        nlohmann::ordered_json::parse(scenario::resolved_json(scenario::load_scenario(f, run_overrides(o), worker::input_checks())));
  }
  std::cout << all.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

// What an earlier run of the suite in the same folder left (--resume).
struct SuiteResume {
  std::map<std::string, nlohmann::json> finished;  // id -> its `finished` record
  std::set<std::string> started;
};

// --resume: reads the journal, which must be this suite's (this shard of
// it): resuming another suite's folder would mix two suites' results into
// one answer. Throws UsageError.
SuiteResume resume_suite(const fs::path& root, const SuiteJournal& journal, const SuitePlan& plan,
                         const std::string& shard_text, const Printer& p) {
  const std::string resume_hint = " (--resume continues a journal dbh wrote; choose another --out)";
  std::set<std::string> mine;
  for (const auto& f : plan.files) mine.insert(plan.ids_of.at(f));
  std::vector<std::string> bad;
  std::vector<nlohmann::json> records;
  try {
    records = journal.read(&bad);
  } catch (const ScenarioError& e) {
    throw ScenarioError(e.what() + resume_hint);
  }
  if (!bad.empty()) {
    // A record in the middle that does not decode: resumed, the folder
    // would never merge (merge refuses it), and what it said is unknown.
    throw UsageError(bad.front() + resume_hint);
  }
  const ResumeState state = resume_state(records, mine, shard_text.substr(0, shard_text.find(' ')));
  if (!state.foreign.empty()) {
    throw UsageError((root / "journal.jsonl").string() + ": --resume: expected the journal of this suite" +
                     (plan.shard ? " shard" : "") + ", got " + state.foreign + " (choose another --out)");
  }
  if (journal.drop_torn_tail()) p.line("resume: cut the journal's torn last line (the suite was killed mid-write)");
  return SuiteResume{state.finished, state.started};
}

// The suite's reports, in order, with the ids of the scenarios a stop left
// unrun.
struct SuiteRun {
  std::vector<run::RunReport> reports;
  std::vector<std::string> ids, interrupted;
};

// Runs each scenario of the plan, or takes its report from an earlier run
// when it finished there with the same configuration and inputs; every
// start and finish is journaled. Throws UsageError (a scenario's half-written
// folder removed first).
SuiteRun run_suite_scenarios(const RunOptions& o, const SuitePlan& plan, const fs::path& root,
                             const SuiteJournal& journal, SuiteResume& earlier, const Printer& p) {
  SuiteRun run;
  for (const auto& f : plan.files) {
    const std::string& id = plan.ids_of.at(f);
    run.ids.push_back(id);
    auto it = earlier.finished.find(id);
    if (it != earlier.finished.end()) {
      if (const std::string why = rerun_reason(it->second, plan.hash_of.at(f), plan.inputs_of.at(f)); !why.empty()) {
        p.line("rerun " + id + ": " + why);
        it = earlier.finished.end();
      }
    }
    if (it != earlier.finished.end()) {
      const auto text = read_regular_file((fs::path(field_or(it->second, "dir", "")) / "report.json").string(),
                                          size_t{64} << 20);
      const auto j = nlohmann::json::parse(text.value_or(""), nullptr, false);
      if (!j.is_discarded()) {
        run::RunReport r = report_from_json(j);
        r.out_dir = field_or(it->second, "dir", "");
        p.line("skip  " + id + ": finished in an earlier run (" + to_string(r.outcome) + ")");
        run.reports.push_back(r);
        continue;
      }
    }
    if (earlier.started.count(id) && !earlier.finished.count(id)) p.line("rerun " + id + ": interrupted in an earlier run");
    earlier.finished.erase(id);  // whatever an earlier run says, this one runs it
    if (supervisor::stop_requested() != 0) {
      run.interrupted.push_back(id);
      continue;
    }
    const fs::path dir = root / id;
    try {
      journal.append({{"type", "started"}, {"scenario", id}, {"file", f}, {"time", now_iso()}});
      run::RunReport r = run_scenario(f, o, dir, p);
      if (supervisor::stop_requested() != 0) {
        // Stopped mid-scenario: its result is not a result.
        run.interrupted.push_back(id);
        continue;
      }
      journal.append({{"type", "finished"}, {"scenario", id}, {"outcome", to_string(r.outcome)},
                      {"expectation_met", r.expectation_met}, {"dir", fs::absolute(dir).string()},
                      {"hash", plan.hash_of.at(f)}, {"inputs", plan.inputs_of.at(f).hash()}, {"time", now_iso()}});
      print_summary(r, p);
      run.reports.push_back(std::move(r));
    } catch (const ReportError&) {
      // Cannot write (disk full): the journal keeps what finished; this
      // scenario's half-written folder goes, and --resume re-runs it.
      std::error_code ec;
      fs::remove_all(dir, ec);
      throw;
    }
  }
  return run;
}

// The suite's results for a CI system (GitHub's annotations and summary),
// interrupted scenarios included.
void publish_suite_results(const RunOptions& o, const SuitePlan& plan, const fs::path& root, const SuiteRun& run,
                           const std::string& shard_text) {
  std::vector<report::CiResult> results;
  for (const auto& r : run.reports) results.push_back(report::ci_result(r));
  for (const auto& id : run.interrupted) {
    report::CiResult c;
    c.scenario = id;
    c.outcome = "interrupted";
    c.message = "the suite was stopped before this scenario finished; continue it with --resume";
    results.push_back(c);
  }
  std::vector<std::string> keep = plan.files;
  keep.insert(keep.end(), plan.inputs.begin(), plan.inputs.end());
  keep.push_back(root.string());
  report::publish_to_github(report::ci_environment(supervisor::process_environment()),
                    "dbh suite" + (shard_text.empty() ? std::string() : " shard " + shard_text), results,
                    o.json ? std::cerr : std::cout, std::cerr, keep);
}

// Runs the suite into `root` (claimed, journaled, resumed with --resume) and
// writes its outputs. Throws UsageError.
SuiteRun run_suite(const RunOptions& o, const SuitePlan& plan, const fs::path& root, const std::string& shard_text,
                   const Printer& p) {
  check_junit(o.junit, "dbh suite", root.string(), plan.files, {}, true);
  check_outside_datasets("dbh suite", "--out", root.string(), plan.data_paths);
  check_outside_datasets("dbh suite", "--junit", o.junit, plan.data_paths);
  if (!o.resume && fs::exists(root / "journal.jsonl")) {
    throw UsageError(root.string() + ": expected an empty folder for a new suite, got one holding an earlier "
                     "suite's journal (add --resume to continue it, or choose another --out)");
  }
  OutputDir claim(root, "suite", o.resume ? OutputDir::Reuse::kContinue : OutputDir::Reuse::kReplace);
  SuiteJournal journal(root / "journal.jsonl");
  SuiteResume earlier;
  if (o.resume) earlier = resume_suite(root, journal, plan, shard_text, p);
  if (plan.shard) p.line("dbh suite: shard " + shard_text + ": " + std::to_string(plan.files.size()) + " scenario(s)");
  // A `suite` record opens every invocation, so even a shard with nothing to
  // run leaves a journal saying that it ran, with what and when.
  journal.append({{"type", "suite"}, {"shard", shard_text}, {"scenarios", plan.files.size()},
                  {"suite_hash", plan.suite_hash}, {"resume", o.resume}, {"host", host_name()}, {"pid", ::getpid()},
                  {"time", now_iso()}});
  // From here the journal is the suite's record: kept whatever happens,
  // so --resume can continue from it.
  claim.commit();
  SuiteRun run = run_suite_scenarios(o, plan, root, journal, earlier, p);
  write_suite_outputs(root, run.reports, run.ids, run.interrupted, o.junit, shard_text, "dbh suite");
  return run;
}

}  // namespace

int suite_command(const RunOptions& o) {
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json, !o.no_progress};
  // From the start: a stop requested while the scenarios are being validated
  // still ends in written outputs (every scenario interrupted) and 128 + signal.
  supervisor::install_stop_handlers();
  SuitePlan plan;
  fs::path root;
  std::string shard_text;
  SuiteRun run;
  try {
    plan = plan_suite(o);
    if (o.print_config) return print_suite_config(o, plan);
    const auto& shard = plan.shard;
    shard_text =
        shard ? std::to_string(shard->index) + "/" + std::to_string(shard->count) + " (" + shard->source + ")" : "";
    root = o.out.empty() ? fs::path(default_output_folder("suite")) : fs::path(o.out);
    if (shard) root /= "shard-" + std::to_string(shard->index) + "-of-" + std::to_string(shard->count);
    run = run_suite(o, plan, root, shard_text, p);
  } catch (const UsageError& e) {  // bad input, a ReportError, --junit, --resume
    std::cerr << "dbh: " << message(e) << "\n";
    return 2;
  }
  if (o.json) {
    std::ifstream in(root / "suite.json");
    std::cout << in.rdbuf();
  }
  publish_suite_results(o, plan, root, run, shard_text);
  // With --json stdout is exactly the JSON document: the closing lines go to
  // stderr.
  std::ostream& human = o.json ? std::cerr : std::cout;
  if (supervisor::stop_requested() != 0) {
    human << "interrupted by signal " << supervisor::stop_requested() << ": " << run.interrupted.size()
          << " scenario(s) not run; resume with --resume --out "
          << shell_quote(o.out.empty() ? root.string() : o.out) << std::endl;
    return 128 + supervisor::stop_requested();
  }
  // As pytest and ctest: a scenario this machine cannot run (its device) is
  // skipped, said, and fails nothing.
  const run::VerdictCounts c = run::count_verdicts(run.reports);
  human << c.met << " passed, " << c.not_met << " failed"
        << (c.skipped > 0 ? ", " + std::to_string(c.skipped) + " skipped (not run on this machine)" : "") << std::endl;
  return c.not_met == 0 ? 0 : 1;
}

}  // namespace dbh::harness::cli
