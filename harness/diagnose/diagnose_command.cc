#include "harness/diagnose/diagnose_command.h"

// dbh diagnose: the seeds' diagnosis ladder, automated.
#include <filesystem>
#include <optional>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/home.h"
#include "harness/diagnose/hypotheses.h"
#include "harness/diagnose/rungs.h"
#include "harness/common/out_file.h"
#include "harness/bisect/bisect_command.h"
#include "harness/probe/cluster.h"
#include "harness/probe/probe.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/report/markdown_html.h"
#include "harness/report/report.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/resolutions.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::diagnose {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// `text` with `{dbh}` as the binary that ran and `{scenario}` as the
// diagnosed scenario's words (its absolute path and overrides), each quoted
// for a shell: the commands of the next steps run as pasted.
std::string fill_commands(std::string text, const std::vector<std::string>& scenario_words) {
  const std::pair<std::string, std::string> fills[] = {{"{dbh}", shell_command({self_command()})},
                                                       {"{scenario}", shell_command(scenario_words)}};
  for (const auto& [key, value] : fills) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size())) {
      text.replace(at, key.size(), value);
    }
  }
  return text;
}



// "optimizer, data": the tied hypotheses' ids.
std::string tied_text(const LadderConclusion& j) {
  std::string t;
  for (const auto id : j.tied) t += (t.empty() ? "" : ", ") + to_string(id);
  return t;
}



// What the follow-up bisection found: its line among the next steps, its
// repro, its verdict for diagnosis.json and what narrows the minimal repro.
struct FollowUp {
  std::vector<std::string> lines;
  std::string repro;
  ojson verdict;  // null when none ran
  std::vector<std::string> repro_overrides;
  std::vector<std::string> difference;  // config: the minimal difference, confirmed (else empty)
  bool confident = false;
};

// `dbh bisect KIND` of the diagnosed scenario (Note [One bisection, called]).
FollowUp bisect_followup(bisect::BisectKind kind, const DiagnoseOptions& o, const scenario::Scenario& s, const fs::path& out,
                         const std::string& cache, const std::vector<std::string>& scenario_words, probe::Prober& prober) {
  FollowUp f;
  bisect::BisectOptions b;
  b.kind = kind;
  b.scenario = o.scenario;
  b.overrides = concat_overrides(o.overrides, {"controls=[]"});
  std::vector<std::string> words = scenario_words;
  if (kind == bisect::BisectKind::kConfig) {
    // Note [The run without the command's overrides]: the scenario as it
    // is against the scenario with them, what the command checks on both
    // sides (Note [What the command checks is not a cause]).
    const CommandOverrides split = split_command_overrides(o.overrides);
    b.overrides = concat_overrides(split.checks, {"controls=[]"});
    b.bad = split.changes;
    b.bad_as_overrides = true;
    std::string bad;
    for (const auto& ov : split.changes) bad += (bad.empty() ? "" : " ") + ov;
    words = {scenario_words.front()};
    words.insert(words.end(), split.checks.begin(), split.checks.end());
    words.insert(words.end(), {"--good", scenario_words.front(), "--bad", bad});
  }
  b.out = (out / ("bisect-" + to_string(b.kind))).string();
  b.cache_dir = cache;
  b.quiet = o.quiet;
  b.jobs = o.jobs;
  b.checks = o.checks;
  if (!o.quiet) {
    std::vector<std::string> command = {self_command(), "bisect", to_string(b.kind)};
    command.insert(command.end(), words.begin(), words.end());
    std::cout << "follow-up: " << shell_command(command) << std::endl;
  }
  // Note [One bisection, called]: the follow-up is the bisection itself,
  // its folder and pages beside the diagnosis, its answer returned as a
  // value (never read back from its bisect.json).
  bisect::BisectAnswer answer;
  const int bisect_exit = bisect::bisect_command(b, &answer);
  prober.stop_if_requested();  // a stop ended the follow-up: end here too
  if (bisect_exit == 2) {
    // A probe of the follow-up hit an infrastructure failure (its message
    // is above): the diagnosis cannot stand on it either.
    throw UsageError("diagnose: the follow-up `dbh bisect " + to_string(b.kind) + "` stopped without an answer (" +
                     (out / ("bisect-" + to_string(b.kind))).string() + ")");
  }
  // The follow-up's answer as a value (Note [One bisection, called]).
  const std::string verdict = answer.confident ? "confident" : "unsure";
  f.repro = answer.repro;
  f.confident = answer.confident;
  if (answer.confirmed) f.difference = answer.difference;
  f.verdict = {{"kind", to_string(b.kind)}, {"verdict", verdict}, {"confirmed", answer.confirmed},
               {"confidence", answer.confidence}, {"doubts", answer.doubts}};
  std::string doubts;
  for (const auto& d : answer.doubts) doubts += (doubts.empty() ? "" : "; ") + d;
  f.lines.push_back("dbh bisect " + to_string(b.kind) + " (" + verdict + ", confidence " +
                    std::to_string(answer.confidence).substr(0, 5) + "): " + answer.summary +
                    (doubts.empty() ? "" : " (unsure: " + doubts + ")"));
  // Only a confident, training-time answer (ddmin's, or the read that
  // raised, trained on alone) becomes the minimal repro; otherwise the
  // scenario as given reproduces the failure.
  if (b.kind == bisect::BisectKind::kData && answer.confident && !answer.before_training && !answer.samples.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < answer.samples.size(); ++i) list += (i ? "," : "") + std::to_string(answer.samples[i]);
    f.repro_overrides.push_back(scenario::override_text(DBH_SCENARIO_KEY(data.subset), list + "]"));
    f.repro_overrides.push_back(scenario::override_text(
        DBH_SCENARIO_KEY(train.max_steps),
        std::to_string(std::max<int64_t>(
            1, (static_cast<int64_t>(answer.samples.size()) + s.data.batch_size - 1) / s.data.batch_size))));
  }
  return f;
}

// The bisection after the ladder: `bisect data` when the failure is in the samples (Note [The samples, named]),
// `bisect modules` for a non-finite value, else none (a silent failure has no bad sample to find: its follow-up is
// the learning rungs). `klass`: "" when it passes.
std::optional<FollowUp> ladder_followup(const LadderConclusion& judgement, const std::string& klass,
                                        const DiagnoseOptions& o, const scenario::Scenario& s, const fs::path& out,
                                        const std::string& cache, const std::vector<std::string>& scenario_words,
                                        probe::Prober& prober) {
  const bool nonfinite = klass.rfind("nonfinite_", 0) == 0;
  if (!judgement.find_samples && !nonfinite) return std::nullopt;
  return bisect_followup(judgement.find_samples ? bisect::BisectKind::kData : bisect::BisectKind::kModules, o, s,
                         out, cache, scenario_words, prober);
}

// A diagnosis as its pages show it: what ran, what it showed, what to do next.
struct Diagnosis {
  std::string scenario;  // the path, as given
  std::string name;
  std::string device;
  fs::path out;
  bool fails = false;
  bool silent = false;  // a silent failure: the learning rungs are shown
  scenario::Outcome outcome = scenario::Outcome::kPassed;  // the scenario as given
  std::string klass;
  std::vector<Rung> rows;  // the ladder, the variants, the learning rungs, in that order
  LadderConclusion judgement;
  std::vector<std::string> scenario_words;  // the diagnosed scenario as a command's words
  std::vector<std::string> followups;
  std::string bisect_summary;
  ojson bisect_verdict;
  // The finest confident answer of what makes it fail: the samples (Note
  // [The samples, named]), else the config bisection's when the command's
  // overrides make it fail.
  std::string cause;
  const kb::FailureClass* resolution_class = nullptr;  // the failure's class, when it has resolutions to try
  std::vector<supervisor::ResolutionCheck> resolution_checks;
  std::string emulated;  // why the ranking is an emulation's, "" for a real failure
  size_t probe_count = 0;
  int64_t jobs = 1;
  int64_t parallel_probes = 0;  // of the ladder's own probes: run ahead (Note [Probes ahead, in parallel])
  int64_t forked_probes = 0;    // of the ladder's own probes: forked from a warm worker (Note [A warm worker])
  double seconds = 0;

  std::string repro_command() const { return shell_command({self_command(), "run", (out / "repro.yaml").string()}); }
  // Hypotheses explain a failure: with no evidence for any, ranking them would make one up.
  bool no_evidence() const { return fails && judgement.ranked.front().score() <= 0; }
};

std::string diagnosis_markdown(const Diagnosis& d) {
  const auto& hyps = d.judgement.ranked;
  std::ostringstream md;
  md << "# Diagnosis: " << markdown_inline(d.name) << "\n\n";
  md << "Scenario " << markdown_code(d.scenario) << " on " << d.device << ": the full run "
     << (d.fails ? "**fails** (" + to_string(d.outcome) + ", `" + d.klass + "`)" : "**passes**") << ".\n\n";
  if (!d.emulated.empty()) md << "**Emulated.** " << markdown_inline(d.emulated) << ".\n\n";
  md << "## What works / What fails\n\n| check | result |\n|---|---|\n";
  for (const auto& r : d.rows) {
    if (!d.fails && (r.group == "variant" || r.group == "learning rate" || r.group == "overrides")) continue;
    if (!d.silent && r.group == "learning") continue;
    md << "| " << r.name << " | " << row_result(r) << " |\n";
  }
  md << "\n## Hypotheses, ranked by evidence\n\n";
  if (d.no_evidence()) {
    md << "No hypothesis has more evidence for it than against it in the rungs that could run";
    md << (std::any_of(d.rows.begin(), d.rows.end(),
                       [](const Rung& r) { return r.group == "ladder" && !r.applies.empty(); })
               ? " (the rungs marked n/a above could not)"
               : "");
    md << ": the diagnosis is unsure.\n\n";
  }
  if (d.fails && !d.judgement.tied.empty()) {
    md << "The best " << d.judgement.tied.size() << " hypotheses have the same evidence (" << tied_text(d.judgement)
       << "): the diagnosis is unsure between them, and the list's order decides nothing.\n\n";
  }
  if (!d.judgement.could_decide.empty()) {
    md << "The rungs that could decide between them did not run or could not tell:\n\n";
    for (const auto& c : d.judgement.could_decide) md << "- " << c << "\n";
    md << "\n";
  }
  int rank = 0;
  for (const auto& h : hyps) {
    if (h.support.empty() && h.refute.empty()) continue;
    md << ++rank << ". **" << h.title << "** (weight " << h.weight_for() << " for, " << h.weight_against()
       << " against)\n";
    // Note [Evidence by direction]: each line with how much it weighs.
    for (const auto& e : h.support) {
      md << "   - supports (" << to_string(e.strength) << ", +" << static_cast<int>(e.strength) << "): " << e.text << "\n";
    }
    for (const auto& e : h.refute) {
      md << "   - refutes (" << to_string(e.strength) << ", −" << static_cast<int>(e.strength) << "): " << e.text << "\n";
    }
  }
  md << "\n## Next steps\n\n";
  int step_no = 0;
  for (const auto& h : hyps) {
    if (h.score() <= 0) continue;
    md << ++step_no << ". " << h.title << ": " << fill_commands(h.next, d.scenario_words) << "\n";
  }
  for (const auto& f : d.followups) md << ++step_no << ". Done already: " << f << "\n";
  if (d.fails && d.resolution_class != nullptr) {
    for (const auto& res : report::resolutions_with_checks(d.resolution_class->resolutions, d.resolution_checks, true)) {
      md << ++step_no << ". " << res << "\n";
    }
  }
  if (d.fails) {
    md << "\n## Minimal reproduction\n\n`repro.yaml` next to this report; run it with\n\n```sh\n"
       << d.repro_command() << "\n```\n";
    if (!d.bisect_summary.empty()) md << "\nor, as the bisection found it:\n\n```sh\n" << d.bisect_summary << "\n```\n";
  }
  return md.str();
}

ojson diagnosis_json(const Diagnosis& d) {
  ojson j;
  // 2: each hypothesis's support and refute lines are {text, strength, weight} (Note [Evidence by direction]).
  j["schema_version"] = 2;
  j["scenario"] = d.scenario;
  j["fails"] = d.fails;
  j["data_dependent"] = d.judgement.data_dependent;
  j["rows"] = ojson::array();
  for (const auto& r : d.rows) {
    j["rows"].push_back({{"check", r.name}, {"group", r.group}, {"overrides", r.overrides},
                         {"ran", r.ran}, {"applies", r.applies.empty()}, {"result", row_result(r)},
                         {"outcome", r.ran ? to_string(r.probe.analysis.outcome) : "n/a"},
                         {"class", r.probe.analysis.failure.klass}});
  }
  j["hypotheses"] = ojson::array();
  for (const auto& h : d.judgement.ranked) {
    const auto lines = [](const std::vector<EvidenceLine>& es) {
      ojson a = ojson::array();
      for (const auto& e : es) a.push_back({{"text", e.text}, {"strength", to_string(e.strength)}, {"weight", static_cast<int>(e.strength)}});
      return a;
    };
    j["hypotheses"].push_back({{"id", to_string(h.id)}, {"title", h.title}, {"support", lines(h.support)},
                               {"refute", lines(h.refute)}, {"score", h.score()}});
  }
  // No evidence for any hypothesis is no conclusion, not the first of the list.
  j["conclusion"] = d.judgement.conclusion;
  j["emulated"] = d.emulated.empty() ? ojson(nullptr) : ojson(d.emulated);
  j["tied"] = ojson::array();
  for (const auto id : d.judgement.tied) j["tied"].push_back(to_string(id));
  j["could_decide"] = d.judgement.could_decide;
  j["followups"] = d.followups;
  j["resolutions_tried"] = report::resolution_checks_json(d.resolution_checks);
  j["bisect"] = d.bisect_verdict;
  j["cause"] = d.cause.empty() ? ojson(nullptr) : ojson(d.cause);
  j["probe_count"] = d.probe_count;
  j["jobs"] = d.jobs;
  j["parallel_probes"] = d.parallel_probes;
  j["forked_probes"] = d.forked_probes;
  j["executor"] = probe::executor_description();  // Note [Probes on a cluster]
  j["seconds"] = d.seconds;
  j["repro_scenario"] = d.fails ? ojson((d.out / "repro.yaml").string()) : ojson(nullptr);
  return j;
}

// The conclusion, the top hypothesis and where the report and the repro are.
std::string diagnosis_summary(const Diagnosis& d) {
  std::ostringstream s;
  s << "conclusion: " << terminal_text(d.judgement.conclusion)
    << (d.judgement.data_dependent ? " (synthetic data passes, the real data fails)" : "") << "\n";
  if (!d.emulated.empty()) s << "note: " << terminal_text(d.emulated) << "\n";
  if (d.fails && !d.judgement.tied.empty()) {
    s << "top hypotheses: tied (" << tied_text(d.judgement) << "), none stands out\n";
  } else if (d.fails && !d.no_evidence()) {
    s << "top hypothesis: " << d.judgement.ranked.front().title << "\n";
  }
  if (d.no_evidence()) s << "top hypothesis: none has more evidence for it than against it\n";
  if (!d.cause.empty()) s << "cause: " << terminal_text(d.cause) << "\n";
  if (!d.judgement.could_decide.empty()) {
    s << "could decide, but did not run: " << terminal_text(d.judgement.could_decide.front())
      << (d.judgement.could_decide.size() > 1 ? " (and " + std::to_string(d.judgement.could_decide.size() - 1) +
                                                     " more in the report)"
                                               : "")
      << "\n";
  }
  s << "report: " << (d.out / "diagnosis.md").string() << "\n";
  if (d.fails) s << "repro:  " << d.repro_command() << "\n";
  return s.str();
}

// repro.yaml: the diagnosed scenario with its overrides and the follow-up's,
// as load_scenario applies them (the user's own keys, worker.keys' names and
// the Lightning/Hydra aliases in the scenario's words).
std::string repro_scenario_text(const DiagnoseOptions& o, const std::vector<std::string>& repro_overrides) {
  std::ostringstream repro_yaml;
  repro_yaml << "# Minimal reproduction written by dbh diagnose.\n"
             << "include: " << fs::absolute(o.scenario).string() << "\n";
  auto all = o.overrides;
  all.insert(all.end(), repro_overrides.begin(), repro_overrides.end());
  const Value tree = scenario::override_layer(o.scenario, all);
  const auto j = nlohmann::ordered_json::parse(to_json(tree));
  for (auto it = j.begin(); it != j.end(); ++it) repro_yaml << it.key() << ": " << it.value().dump() << "\n";
  return repro_yaml.str();
}

// Note [Resolutions that are tried]: each resolution of the class that can
// be expressed as overrides, probed; a cached result names the folder of the
// run it reuses when that run belongs to this diagnosis. A learning rate the
// search found is the value its check runs with.
std::vector<supervisor::ResolutionCheck> probe_resolutions(const kb::FailureClass& c, const scenario::Scenario& s, probe::Prober& prober,
                                               const fs::path& out, const RateSearch& rates) {
  const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck& check, const std::vector<std::string>& with, size_t) {
    // Note [Keys that never reach the worker]: not applicable, never refuted
    // by a run that did not change.
    if (const std::string why = supervisor::overrides_not_passed(s, check.overrides); !why.empty()) throw ScenarioError(why);
    std::string label = "resolution " + std::to_string(check.resolution + 1) + ":";
    for (const auto& o : check.overrides) label += " " + o;
    const auto p = prober.probe(with, one_line(label));
    supervisor::ResolutionRun result;
    result.outcome = p.analysis.outcome;
    result.klass = p.analysis.failure.klass;
    const std::string& dir = p.dir.empty() ? p.cached_from : p.dir;
    result.dir = dir.empty() ? "" : fs::path(dir).lexically_relative(out).string();
    return result;
  };
  // Note [A measured value over a rule of thumb]: the searched rate, not a tenth.
  supervisor::MeasuredValues measured{{}, "the learning-rate search"};
  if (const Rung* rate = rates.answer()) measured.values[DBH_SCENARIO_KEY(train.lr)] = number_text(rate->rate);
  std::vector<supervisor::ResolutionCheck> checks = supervisor::try_resolutions(
      c, nlohmann::json::parse(scenario::resolved_json(s)), run, [] { return false; }, measured);
  supervisor::spell_as_passed(checks, s);
  return checks;
}

// The diagnosed scenario as the words of a command: its absolute path and
// the overrides it was diagnosed with.
std::vector<std::string> scenario_words(const DiagnoseOptions& o) {
  std::vector<std::string> words = {fs::absolute(o.scenario).lexically_normal().string()};
  words.insert(words.end(), o.overrides.begin(), o.overrides.end());
  return words;
}

// Note [The run without the command's overrides]: runs `rung` (the
// scenario without the command's overrides, through a Prober without them)
// and, when it trains, the config bisection between the two.
std::optional<FollowUp> run_without_overrides(const DiagnoseOptions& o, const scenario::Scenario& s, const fs::path& out,
                                              const std::string& cache, Rung& rung, probe::Prober& prober,
                                              ProbeBudget& budget) {
  if (!rung.applies.empty()) return std::nullopt;
  probe::Prober plain(o.scenario, split_command_overrides(o.overrides).checks, out.string(), cache, o.quiet, o.checks);
  run_rung(plain, rung, &budget);
  if (!rung.ran || rung.probe.analysis.outcome != scenario::Outcome::kPassed) return std::nullopt;
  return bisect_followup(bisect::BisectKind::kConfig, o, s, out, cache, scenario_words(o), prober);
}

// Note [The learning rate, searched]: where the search stopped, for the weighing.
void set_rate_search(Ladder& ladder, const RateSearch& rates) {
  ladder.lr_floor = rates.floor;
  ladder.lr_floor_is_configured = rates.floor_is_configured;
  ladder.lr_reached_floor = rates.reached_floor;
}

// The learning rate the diagnosed scenario holds without the command's
// overrides; 0 when it cannot be read without them.
double configured_rate(const DiagnoseOptions& o) {
  try {
    return scenario::load_scenario(o.scenario, {}, o.checks).train.lr;
  } catch (const ScenarioError&) {
    return 0;
  }
}

// The variants of a failing scenario, under a budget the next chosen after
// every probe among those that can weigh on the hypotheses the evidence so
// far leaves best (Note [The next probe chosen to decide]), then its
// learning-rate search (Note [The learning rate, searched]: down to the
// configuration's own rate when the command's overrides raised it).
RateSearch run_variants(const DiagnoseOptions& o, const scenario::Scenario& s, const std::vector<Rung>& rungs,
                        std::vector<Rung>& variants, probe::Prober& prober, ProbeBudget& budget) {
  const auto& failure = rungs.back().probe.analysis;  // the scenario as given
  const bool real = s.data.source == scenario::DataSource::kReal;
  const auto judge = [&] {
    Ladder now = ladder_of({&rungs, &variants}, failure.failure.klass, false, real);
    now.failure_step = failure.failure.step;
    return conclude_ladder(now);
  };
  if (budget.max > 0 && prober.jobs() == 1) {
    run_to_decide(variants, judge, [&](Rung& r) { run_rung(prober, r, &budget); });
  } else {
    if (budget.max > 0) order_to_decide(variants, judge());  // once: the variants run ahead in parallel
    run_rungs(prober, variants, &budget);
  }
  return search_learning_rate(prober, s, failure, configured_rate(o), &budget);
}

// Note [An injected failure says so]: a failure an emulated GPU fault raised
// (dbh threw the error's text) ranks the hypotheses by how the emulation
// behaves; what a real kernel or allocator does only a GPU shows. "" for any
// other failure.
std::string emulation_note(const supervisor::TrialAnalysis& a, const scenario::Scenario& s) {
  if (!supervisor::emulated_gpu_fault(a)) return "";
  return "the failure was raised by " + supervisor::injected_faults(a) +
         "; the hypotheses are ranked by how that emulation behaved on " + s.hardware.device +
         ", and only a run on a GPU shows what a real kernel does";
}

// diagnosis.md, diagnosis.html and diagnosis.json in `d.out`.
// How many probes the diagnosis ran, and how (ahead, forked).
void count_probes(const probe::Prober& prober, Diagnosis& d) {
  d.probe_count = prober.history().size();
  d.jobs = prober.jobs();
  const probe::ProbeCounts counts = probe::count_probes(prober.history());
  d.parallel_probes = counts.parallel;
  d.forked_probes = counts.forked;
}

void write_diagnosis(const Diagnosis& d) {
  const std::string md = diagnosis_markdown(d);
  write_file_atomically((d.out / "diagnosis.md").string(), md);
  write_file_atomically((d.out / "diagnosis.html").string(), report::markdown_page_html("Diagnosis: " + d.name, md));
  write_file_atomically((d.out / "diagnosis.json").string(),
                        diagnosis_json(d).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace

int diagnose_command(const DiagnoseOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<OutputDir> claim;  // locked while written; removed unless it ends with a diagnosis
  return probe::run_search(claim, [&]() -> int {
    const scenario::Scenario s = scenario::load_scenario(o.scenario, o.overrides, o.checks);
    probe::Cluster::take_scenario_defaults(s.cluster);  // Note [Probes on a cluster]
    const fs::path out = o.out.empty() ? fs::path(default_output_folder("diagnose-" + fs::path(o.scenario).stem().string()))
                                       : fs::path(o.out);
    const std::string cache = o.cache_dir.empty() ? default_probe_cache() : o.cache_dir;
    check_outside_datasets("dbh diagnose", "--out", out.string(), scenario::dataset_folders(s));
    check_outside_datasets("dbh diagnose", "--cache", cache, scenario::dataset_folders(s));
    // Continued as a bisection's folder is: probes keep their sessions.
    claim.emplace(out, "diagnose " + fs::absolute(o.scenario).lexically_normal().string(),
                  OutputDir::Reuse::kContinue);
    probe::Prober prober(o.scenario, o.overrides, out.string(), cache, o.quiet, o.checks);
    prober.set_jobs(o.jobs);
    const bool real = s.data.source == scenario::DataSource::kReal;
    if (!o.quiet) std::cout << "dbh diagnose " << one_line(s.name) << " (" << s.hardware.device << ")" << std::endl;

    std::vector<Rung> rungs = ladder_rungs(s);
    for (const auto& note : supervisor::check_worker(s)) std::cerr << "dbh diagnose: note: " << one_line(note) << "\n";
    run_rungs(prober, rungs);
    const Rung& full = rungs.back();  // the scenario as given
    check_against_scenario(rungs, full.probe.analysis);  // Note [A rung is checked against what its trial did]
    const bool fails = supervisor::is_failure(full.probe.analysis.outcome);
    std::vector<Rung> variants = variant_rungs(s);
    RateSearch rates;
    ProbeBudget budget{o.max_probes, 0};
    // Note [The run without the command's overrides]: a failing command that
    // changes its scenario is run without the changes; when that trains,
    // the config bisection between the two names the change, and its answer
    // is evidence. First under a budget (Note [The next probe chosen to
    // decide]).
    std::vector<Rung> without = without_overrides_rungs(split_command_overrides(o.overrides));
    const std::optional<FollowUp> config_followup =
        fails ? run_without_overrides(o, s, out, cache, without.front(), prober, budget) : std::nullopt;
    if (fails) rates = run_variants(o, s, rungs, variants, prober, budget);
    // Note [The learning rung]: a silent failure (the run stays finite but
    // learns nothing, or its metrics miss) asks the seeds' other question:
    // does the model learn at all? The same training on synthetic boxes and on
    // the real data, each judged by the loss-falling check over a fixed
    // window, separates an optimizer that changes nothing (flat on both) from
    // labels or inputs that give it nothing to learn (falls on synthetic
    // data only).
    const std::string& full_class = full.probe.analysis.failure.klass;
    const kb::FailureClass* full_kb = kb::KnowledgeBase::shipped().find(full_class);
    const bool silent = fails && full_kb != nullptr && full_kb->silent;
    std::vector<Rung> learning = learning_rungs(s, silent);
    run_rungs(prober, learning, &budget);
    check_against_scenario(learning, full.probe.analysis);
    // Compute is done: what the rungs showed, judged by one pure function.
    Ladder ladder =
        ladder_of({&rungs, &without, &variants, &rates.rungs, &learning}, fails ? full_class : "", silent, real);
    if (config_followup) ladder.override_cause = config_followup->difference;
    ladder.failure_step = full.probe.analysis.failure.step;
    set_rate_search(ladder, rates);
    const LadderConclusion judgement = conclude_ladder(ladder);

    const std::vector<std::string> scenario_words = diagnose::scenario_words(o);
    // Follow-ups, as a person would do next.
    std::vector<std::string> followups;
    if (config_followup) followups = config_followup->lines;
    std::vector<std::string> repro_overrides = {"controls=[]"};
    std::string cause = config_followup && !config_followup->difference.empty() ? config_followup->lines.front() : "";
    const std::optional<FollowUp> next =
        ladder_followup(judgement, fails ? full_class : "", o, s, out, cache, scenario_words, prober);
    if (next) {
      followups.insert(followups.end(), next->lines.begin(), next->lines.end());
      repro_overrides.insert(repro_overrides.end(), next->repro_overrides.begin(), next->repro_overrides.end());
      if (judgement.find_samples && next->confident) cause = next->lines.front();
    }
    if (const std::string line = rate_search_summary(rates, s); !line.empty()) followups.push_back(line);
    // The minimal repro scenario, next to the report. A scenario that passes
    // has no failure to reproduce.
    if (fails) write_file_atomically((out / "repro.yaml").string(), repro_scenario_text(o, repro_overrides));

    // Reports.
    // Note [Resolutions that are tried]: the failure's resolutions that the
    // knowledge base can express as overrides, each probed and marked
    // confirmed or refuted among the next steps.
    const kb::FailureClass* resolution_class = fails ? kb::KnowledgeBase::shipped().find(full.probe.analysis.failure.klass)
                                                 : nullptr;
    const std::vector<supervisor::ResolutionCheck> resolution_checks =
        resolution_class != nullptr ? probe_resolutions(*resolution_class, s, prober, out, rates)
                                    : std::vector<supervisor::ResolutionCheck>{};

    const std::string emulated = fails ? emulation_note(full.probe.analysis, s) : "";
    Diagnosis d;
    d.scenario = o.scenario;
    d.name = s.name;
    d.device = s.hardware.device;
    d.out = out;
    d.fails = fails;
    d.silent = silent;
    d.outcome = full.probe.analysis.outcome;
    d.klass = full.probe.analysis.failure.klass;
    d.cause = cause;
    for (const auto* group : {&rungs, &without, &variants, &rates.rungs, &learning}) d.rows.insert(d.rows.end(), group->begin(), group->end());
    d.judgement = judgement;
    d.scenario_words = scenario_words;
    d.followups = followups;
    if (next) d.bisect_summary = next->repro, d.bisect_verdict = next->verdict;
    d.resolution_class = resolution_class;
    d.resolution_checks = resolution_checks;
    d.emulated = emulated;
    count_probes(prober, d);
    d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_diagnosis(d);
    std::cout << diagnosis_summary(d) << std::flush;
    claim->commit();
    return fails ? 1 : 0;
  });
}

}  // namespace dbh::harness::diagnose
