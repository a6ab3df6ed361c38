#include "harness/common/home.h"
#include "harness/common/json_fields.h"
#include "harness/qualify/qualify_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/probe/cluster.h"
#include "harness/probe/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/out_file.h"
#include "harness/numerics/reference.h"
#include "harness/qualify/qualification.h"
#include "harness/qualify/search.h"
#include "harness/report/markdown_html.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/numerics_variant.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::qualify {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// This qualification's command, to run again as pasted: the scenario by its
// absolute path, every override and every option that changes the answer.
std::vector<std::string> rerun_args(const QualifyOptions& o) {
  std::vector<std::string> args = {self_command(), "qualify", path_for_command(o.scenario)};
  args.insert(args.end(), o.overrides.begin(), o.overrides.end());
  if (!o.profile.empty() || !o.budget.empty()) {
    args.insert(args.end(), {o.profile.empty() ? "--budget" : "--profile", o.profile.empty() ? o.budget : o.profile});
  }
  if (o.steps != QualifyOptions{}.steps) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  if (o.margin != QualifyOptions{}.margin) {
    std::ostringstream margin;
    margin << o.margin;
    args.insert(args.end(), {"--margin", margin.str()});
  }
  if (o.host_estimate) args.push_back("--host-estimate");
  if (!o.reference.empty()) args.insert(args.end(), {"--reference", path_for_command(o.reference)});
  if (!o.cache_dir.empty()) args.insert(args.end(), {"--cache", o.cache_dir});
  return args;
}


using Trial = QualifyTrial;

Trial to_trial(const probe::ProbeResult& p, int64_t batch, int64_t accumulation, const std::string& precision) {
  Trial t;
  t.batch = batch;
  t.accumulation = accumulation;
  t.precision = precision;
  t.passed = p.verdict == probe::Verdict::kPass;
  t.outcome = to_string(p.analysis.outcome);
  t.klass = p.analysis.failure.klass;
  t.peak = p.analysis.peak_memory_bytes;
  double sum = 0;
  int64_t n = 0;
  for (const auto& s : p.analysis.steps) {
    if (s.step > 0) sum += s.seconds, ++n;  // the first step includes warm-up
  }
  if (n == 0) {
    for (const auto& s : p.analysis.steps) sum += s.seconds, ++n;
  }
  t.step_seconds = n > 0 ? sum / static_cast<double>(n) : 0.0;
  t.overrides = p.overrides;
  if (p.analysis.budget.is_object()) t.context = field_or(p.analysis.budget, "used_before", int64_t{0});
  return t;
}

// What the CUDA context and libraries took before training on the last GPU
// run (reports/examples/gpu/h100-2026-11-22, seed 003's memory_budget event:
// used_before).
constexpr int64_t kContextBytesH100 = 554500096;

// The overrides of one trial: `batch` × `accumulation` in `precision` for
// `steps` steps under a memory budget of `mem` bytes, in one process, without
// controls.
std::vector<std::string> trial_overrides(const scenario::Scenario& source, int64_t steps, int64_t batch, int64_t accumulation,
                                         const std::string& precision, int64_t mem) {
  return {scenario::override_text(DBH_SCENARIO_KEY(data.batch_size), std::to_string(batch)),
          scenario::override_text(DBH_SCENARIO_KEY(train.accumulation), std::to_string(accumulation)),
          scenario::override_text(DBH_SCENARIO_KEY(train.precision), precision),
          source.train.max_steps >= steps ? scenario::override_text(DBH_SCENARIO_KEY(train.stop_after), std::to_string(steps))
                                          : scenario::override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(steps)),
          scenario::override_text(DBH_SCENARIO_KEY(hardware.memory_budget), std::to_string(mem)),
          "controls=[]",
          scenario::override_text(DBH_SCENARIO_KEY(repeat.processes), "1"),
          scenario::override_text(DBH_SCENARIO_KEY(repeat.in_process), "1"),
          // one process compares nothing: no determinism to expect
          scenario::override_text(DBH_SCENARIO_KEY(expect.deterministic), "null")};
}

// What `o` asks of `source`: the target, its budget and margin, the
// precisions to search; throws UsageError / ScenarioError for what cannot be
// asked (Note [A CPU answer to a GPU question]).
Qualification qualification_asked(const QualifyOptions& o, const scenario::Scenario& source) {
  Qualification q;
  q.scenario = o.scenario;
  q.overrides = o.overrides;
  q.scenario_name = source.name;
  q.profile = o.profile;
  q.steps = o.steps;
  q.rerun_command = shell_command(rerun_args(o));
  q.device = source.hardware.device;
  q.size = source.data.size;
  q.encoder = source.model.encoder;
  q.decoder = model::to_string(source.model.decoder);
  q.effective = source.data.batch_size * source.train.accumulation;
  scenario::HardwareProfile profile;
  if (!o.profile.empty()) profile = scenario::load_profile(o.profile);
  q.target_name = profile.display_name;
  q.target_notes = profile.notes;
  q.budget = profile.memory_bytes;
  if (!o.budget.empty()) {
    const auto b = scenario::parse_bytes(o.budget);
    if (!b || *b <= 0) {
      throw ScenarioError("qualify: --budget: expected a size such as 12GiB, got \"" + o.budget + "\"");
    }
    q.budget = *b;
  }
  if (q.budget <= 0 && o.reference.empty()) {
    throw ScenarioError("qualify: expected --profile NAME, --budget SIZE or --reference FILE");
  }
  // Note [A CPU answer to a GPU question]: host memory holds no CUDA
  // context, no cuDNN/cuBLAS workspace and no caching-allocator overhead,
  // so a GPU profile measured on the CPU answers another question.
  const bool gpu_profile = !o.profile.empty() && !profile.compute_capability.empty();
  const bool on_cpu = !q.cuda();
  if (gpu_profile && on_cpu && !o.host_estimate) {
    throw UsageError(
        "qualify --profile " + o.profile + ": expected a CUDA device to qualify a GPU (" + profile.display_name +
        "), got a scenario that trains on the CPU. Host memory holds no CUDA context, no cuDNN workspace and no "
        "allocator overhead (the CUDA context and libraries alone took " + scenario::format_bytes(kContextBytesH100) +
        " on the H100 of reports/examples/gpu/h100-2026-11-22), so the CPU cannot say whether it fits. On a GPU "
        "machine: " + shell_command({"dbh", "qualify", o.scenario, "--profile", o.profile,
                                     scenario::override_text(DBH_SCENARIO_KEY(hardware.device), "cuda")}) +
        "; here, for a host-memory estimate only: add --host-estimate");
  }
  if (o.host_estimate && !(gpu_profile && on_cpu)) {
    throw UsageError("qualify --host-estimate: expected a GPU profile (--profile) and a scenario on the CPU, got " +
                     std::string(gpu_profile ? "a scenario on " + source.hardware.device : "no GPU profile"));
  }
  if (o.host_estimate) {
    q.estimate_note =
        "a host-memory estimate, not a GPU answer: measured on the CPU, without the CUDA context, the "
        "cuDNN/cuBLAS workspaces and the caching allocator's overhead (the context and libraries alone took " +
        scenario::format_bytes(kContextBytesH100) + " on the H100 of reports/examples/gpu/h100-2026-11-22; the "
        "workspaces depend on the algorithms cuDNN picks on the card)";
  }
  if (!(o.margin >= 0 && o.margin < 0.9)) {  // NaN fails too
    throw ScenarioError("qualify: --margin: expected a fraction in [0, 0.9), got " + std::to_string(o.margin));
  }
  q.margin = o.margin;
  q.margined = static_cast<int64_t>(static_cast<double>(q.budget) * (1.0 - o.margin));
  q.precisions = {"fp32"};
  if (q.cuda()) q.precisions = {"fp32", "fp16", "bf16"};
  // bf16 needs compute capability 8.0 (Ampere) on the target card; the
  // machine emulating it may have it, the target may not (a T4 is 7.5).
  if (q.cuda() && !profile.compute_capability.empty() && std::atof(profile.compute_capability.c_str()) < 8.0) {
    q.precisions.pop_back();
    q.not_searched =
        "bf16 (the target's compute capability " + profile.compute_capability + " has no bf16; 8.0 needed)";
  }
  return q;
}

// Note [A numerics reference]: reads the reference file; throws
// ScenarioError naming the file and what is wrong with it.
numerics::Reference read_reference(const std::string& path) {
  constexpr size_t kMaxReferenceBytes = size_t{256} << 20;
  const std::string text =
      read_input_file(path, "a numerics reference for --reference (written by dbh repeat --record)", kMaxReferenceBytes);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    throw ScenarioError(path + ": expected a numerics reference (JSON written by dbh repeat --record), got text "
                        "that is not JSON");
  }
  return numerics::reference_from_json(j, path);
}

// What every process of the numerics half runs with besides the command's
// overrides: the numbers measured, one process and run each, the
// reference's steps, and (Note [The layout, held to the reference's]) the
// reference's layout where dbh chooses it; `notes` says what was held.
std::vector<std::string> numerics_overrides(const scenario::Scenario& source, int64_t steps,
                                            const numerics::Reference& ref, std::vector<std::string>& notes) {
  std::vector<std::string> extra = {
      scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics), "true"),
      scenario::override_text(DBH_SCENARIO_KEY(repeat.processes), "1"),
      scenario::override_text(DBH_SCENARIO_KEY(repeat.in_process), "1"),
      "controls=[]",
      scenario::override_text(DBH_SCENARIO_KEY(expect.deterministic), "null"),
      source.train.max_steps >= steps ? scenario::override_text(DBH_SCENARIO_KEY(train.stop_after), std::to_string(steps))
                                      : scenario::override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(steps))};
  // Note [The layout, held to the reference's].
  if (const auto layout =
          numerics::layout_to_hold(ref, !source.worker.external() && !source.train.channels_last.has_value())) {
    extra.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.channels_last), *layout ? "true" : "false"));
    notes.push_back(std::string("the memory layout was held to the reference's (") +
                    (*layout ? "channels-last" : "NCHW") +
                    "): the scenario leaves it to dbh's measured choice (train.channels_last: auto), which is dbh's "
                    "speed, not the training's numerics");
  }
  return extra;
}

// The numerics half (Note [A numerics reference]): the reference's steps
// run here by processes that each compute another way (Note [Real
// differences measure the noise]); with the reference's states, every step
// of those starts from the reference's state (Note [The same state, step by
// step]) and as many train freely for the trajectory, each its own way;
// without them, as many free processes as the reference holds (at least 3).
Qualification::Numerics numerics_half(const QualifyOptions& o, const scenario::Scenario& source, numerics::Reference ref,
                                      const fs::path& out, const std::string& cache,
                                      std::vector<Qualification::ProbeRecord>& history) {
  Qualification::Numerics n;
  n.reference_file = o.reference;
  int64_t steps = 0;
  for (const auto& run : ref.side.runs) steps = std::max<int64_t>(steps, static_cast<int64_t>(run.steps.size()));
  const int64_t runs = std::max<int64_t>(3, static_cast<int64_t>(ref.side.runs.size()));
  const fs::path states = fs::absolute(o.reference + numerics::kStatesSuffix).lexically_normal();
  std::error_code ec;
  bool replay = !ref.state_steps.empty() && fs::is_directory(states, ec);
  // What kept the comparison from the reference's states.
  const std::string trajectories_only =
      ": only the free trajectories were compared, and a change smaller than their spread may hide in it";
  std::vector<std::string> notes;
  if (ref.state_steps.empty()) {
    notes.push_back("the reference kept no states (`dbh repeat --record` keeps them beside it, in " +
                    one_line(o.reference) + numerics::kStatesSuffix + ")" + trajectories_only);
  } else if (!replay) {
    notes.push_back("the reference's states are missing (expected the folder " + one_line(states.string()) + ")" +
                    trajectories_only);
  }
  probe::Prober prober(o.scenario, o.overrides, out.string(), cache, o.quiet, o.checks);
  if (replay) {
    const std::string replay_key = scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics_replay), states.string());
    if (const auto cap = supervisor::missing_capability(prober.load({replay_key}))) {
      replay = false;
      notes.push_back("the worker does not serve `" + *cap + "`" + trajectories_only);
    }
  }
  const std::vector<std::string> extra = numerics_overrides(source, steps, ref, notes);
  // As many free runs as replays, each computing its own way (Note [Real
  // differences measure the noise]): the free trajectories' spread here is
  // then measured from the same differences as the reference's, and one
  // free run alone never stands against the reference's spread.
  const int64_t free_runs = runs, replays = replay ? runs : 0;
  if (!o.quiet) {
    std::cout << "dbh qualify " << source.name << " against the reference " << one_line(o.reference) << " ("
              << ref.side.runs.size() << " run(s) of " << steps << " step(s)"
              << (ref.recorded_at.empty() ? "" : ", recorded " + one_line(ref.recorded_at)) << "): "
              << (replay ? std::to_string(replays) + " run(s) here from its states, step by step, and " : "")
              << free_runs << " free run(s)" << std::endl;
  }
  const bool cudnn = !source.worker.external() && source.hardware.device.rfind("cuda", 0) == 0;
  std::vector<probe::ProbeResult> free, replayed;
  for (int64_t i = 0; i < free_runs + replays; ++i) {
    const bool from_states = i >= free_runs;
    const int64_t k = from_states ? i - free_runs : i;
    std::vector<std::string> with = extra;
    const scenario::NumericsVariant variant = supervisor::variant_of_process(k, cudnn);
    with.push_back(scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics_variant), to_string(variant)));
    if (from_states) with.push_back(scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics_replay), states.string()));
    const std::string what = "numerics: " + std::string(from_states ? "from the reference's states, " : "free, ") +
                             to_string(variant) + " (" + std::to_string(steps) + " steps)";
    auto& into = from_states ? replayed : free;
    into.push_back(prober.probe_fresh(with, what));
    const auto& a = into.back().analysis;
    // A state the worker could not take is the reference's fault: said as
    // bad input, never "does not qualify".
    if (from_states && a.outcome == scenario::Outcome::kUnresolved) {
      throw ScenarioError(o.reference + ": its states could not be replayed here (" + one_line(a.failure.message) +
                          ")");
    }
    if (a.outcome != scenario::Outcome::kPassed && n.failed_here.empty()) {
      n.failed_here = to_string(a.outcome) + (a.failure.klass.empty() ? "" : " " + a.failure.klass) +
                      (a.failure.step ? " at step " + std::to_string(*a.failure.step) : "") +
                      (a.failure.message.empty() ? "" : ": " + one_line(a.failure.message));
    }
  }
  const auto analyses = [](const std::vector<probe::ProbeResult>& results) {
    std::vector<const supervisor::TrialAnalysis*> out;
    for (const auto& r : results) out.push_back(&r.analysis);
    return out;
  };
  for (const auto& p : prober.history()) {
    history.push_back({p.what, to_string(p.analysis.outcome), p.analysis.failure.klass, p.analysis.peak_memory_bytes,
                       p.seconds, p.cached});
  }
  n.here.machine = numerics::machine_of(free.front().analysis);
  n.here.runs = numerics::runs_of(analyses(free), source);
  n.here.replays = numerics::runs_of(analyses(replayed), source);
  n.comparison = numerics::compare(ref.side, n.here, numerics::tolerance_for(source.train.precision));
  n.comparison.notes.insert(n.comparison.notes.end(), notes.begin(), notes.end());
  if (!ref.scenario.empty() && ref.scenario != source.name) {
    n.comparison.notes.push_back("the reference was recorded from scenario \"" + ref.scenario + "\", this is \"" +
                                 source.name + "\"");
  }
  // Recording again: the source training, without the faults this command
  // plants in the target.
  std::vector<std::string> record = {self_command(), "repeat", path_for_command(o.scenario)};
  for (const auto& x : o.overrides) {
    if (!scenario::override_sets(x, "faults")) record.push_back(x);
  }
  if (!source.faults.empty()) record.push_back("faults=[]");
  record.insert(record.end(), {"--processes", std::to_string(runs), "--record", path_for_command(o.reference)});
  n.rerun_reference = shell_command(record);
  n.reference = std::move(ref);
  return n;
}

// The memory half: the source setup under the budget, then the largest batch
// per precision within the margined budget, confirmed (Note [Source first],
// Note [Affine memory model]).
void memory_half(const QualifyOptions& o, const scenario::Scenario& source, const fs::path& out, const std::string& cache,
                 Qualification& q) {
  const int64_t budget = q.budget, margined = q.margined, effective = q.effective;
  // The layout and threads are measured once, for the source setup, and
  // pinned for every trial: the search compares batches, not layouts, and
  // a measurement per batch would cost more than the trials.
  scenario::Scenario measured = source;
  const nlohmann::json choices = supervisor::resolve_measured_choices(measured, (out / "tuning").string());
  std::vector<std::string> base_overrides = o.overrides;
  if (!choices.is_null()) {
    base_overrides.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.channels_last),
                                           measured.train.channels_last.value_or(false) ? "true" : "false"));
    base_overrides.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.threads),
                                           std::to_string(std::max<int64_t>(0, measured.train.threads))));
  }
  probe::Prober prober(o.scenario, base_overrides, out.string(), cache, o.quiet, o.checks);
  const bool cuda = q.cuda();
  if (!o.quiet) {
    std::cout << "dbh qualify " << source.name << " for "
              << (o.profile.empty() ? "a budget" : q.target_name) << ": " << scenario::format_bytes(budget)
              << " (" << scenario::format_bytes(margined) << " with a " << static_cast<int>(o.margin * 100)
              << "% safety margin), source effective batch " << effective << " (" << source.data.batch_size << " x "
              << source.train.accumulation << ")" << std::endl;
  }
  // Note [Affine memory model]: a step's peak memory is close to affine in
  // the micro-batch (weights, optimizer state and workspaces, plus
  // activations per sample). Two measured points predict the largest batch
  // within the margined budget and one fresh run confirms it; when the
  // prediction misses (an allocator that is not affine, a host limit on
  // address space rather than on resident memory) a binary search over the
  // batch is the fallback. The peak is the CUDA allocator's on a GPU (the
  // budget's ballast and context are outside it) and the process's on a CPU.
  auto peak_of = [&](const probe::ProbeResult& p) -> int64_t {
    return cuda ? p.analysis.max_step_peak_bytes : p.analysis.peak_memory_bytes;
  };
  // Note [Source first]: the source setup runs first, fresh, under the full
  // budget, so whether it fits is measured, never predicted. When it fits,
  // its peak is the upper point of its precision's line. When it runs out of
  // memory (early: in its first step, before the trial's cost), its need
  // exceeds the budget, which with batch 1 bounds the memory per sample from
  // below; the largest divisor of the effective batch under that bound is
  // the one to confirm. So the shipped CPU case takes three trials (source,
  // batch 1, confirmation), the dearest of them the one at the answer.
  const std::string src_label = std::to_string(source.data.batch_size) + "x" +
                                std::to_string(source.train.accumulation) + " " +
                                model::to_string(source.train.precision);
  const probe::ProbeResult source_probe =
      prober.probe_fresh(trial_overrides(source, o.steps, source.data.batch_size, source.train.accumulation,
                                         model::to_string(source.train.precision), budget),
                         "source config " + src_label + " under the budget");
  Trial source_trial = to_trial(source_probe, source.data.batch_size, source.train.accumulation,
                                model::to_string(source.train.precision));
  source_trial.peak = peak_of(source_probe);
  int64_t trials = 1;
  const bool source_out_of_memory = !source_trial.passed && supervisor::is_memory_exhaustion(source_trial.klass);
  // What the source needs: its peak when it fits, else predicted from its
  // precision's line (set below) when that precision has one.
  int64_t source_need = source_trial.passed ? source_trial.peak : 0;

  using Rec = PrecisionSearchResult;
  std::vector<Rec> recs;
  for (const auto& precision : q.precisions) {
    PrecisionSearchInput in;
    in.precision = precision;
    in.effective = effective;
    in.source_batch = source.data.batch_size;
    in.source_accumulation = source.train.accumulation;
    in.source_precision = model::to_string(source.train.precision);
    in.source = source_trial;
    in.source_out_of_memory = source_out_of_memory;
    in.budget = budget;
    in.margined = margined;
    PrecisionSearchTrials run;
    run.measure = [&](int64_t b) {
      const auto p = prober.probe(trial_overrides(source, o.steps, b, 1, precision, margined),
                                  precision + " batch " + std::to_string(b) + " (margined budget)");
      Trial t = to_trial(p, b, 1, precision);
      t.peak = peak_of(p);
      return t;
    };
    run.confirm = [&](int64_t batch, int64_t accumulation) {
      // A confirmation runs fresh: never answered from a cache.
      const auto p = prober.probe_fresh(trial_overrides(source, o.steps, batch, accumulation, precision, budget),
                                        "confirm " + precision + " " + std::to_string(batch) + "x" +
                                            std::to_string(accumulation));
      Trial t = to_trial(p, batch, accumulation, precision);
      t.peak = peak_of(p);
      return t;
    };
    Rec rec = search_precision(in, run);
    if (rec.source_need) source_need = *rec.source_need;
    trials += rec.probes;
    recs.push_back(std::move(rec));
  }
  q.choices = choices;
  q.source = source_trial;
  q.source_need = source_need;
  q.searches = std::move(recs);
  q.trial_count = trials;
  for (const auto& p : prober.history()) {
    q.history.push_back({p.what, to_string(p.analysis.outcome), p.analysis.failure.klass,
                         p.analysis.peak_memory_bytes, p.seconds, p.cached});
  }
}

}  // namespace

int qualify_command(const QualifyOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<OutputDir> claim;  // locked while written; removed unless it ends with a verdict
  return probe::run_search(claim, [&]() -> int {
    const scenario::Scenario source = scenario::load_scenario(o.scenario, o.overrides, o.checks);
    probe::Cluster::take_scenario_defaults(source.cluster);  // Note [Probes on a cluster]
    for (const auto& note : supervisor::check_worker(source, {{supervisor::capability::kMemoryBudget, "dbh qualify"}})) {
      std::cerr << "dbh qualify: note: " << one_line(note) << "\n";
    }
    // The reference is read before anything runs: a bad file is exit 2.
    std::optional<numerics::Reference> reference;
    if (!o.reference.empty()) reference = read_reference(o.reference);
    Qualification q = qualification_asked(o, source);
    if (!q.estimate_note.empty()) std::cerr << "dbh qualify: note: " << q.estimate_note << "\n";
    const fs::path out = o.out.empty() ? fs::path(default_output_folder(
                                             "qualify-" + fs::path(o.scenario).stem().string() + "-" +
                                             (o.profile.empty() ? "budget" : o.profile)))
                                       : fs::path(o.out);
    const std::string cache = o.cache_dir.empty() ? default_probe_cache() : o.cache_dir;
    check_outside_datasets("dbh qualify", "--out", out.string(), scenario::dataset_folders(source));
    check_outside_datasets("dbh qualify", "--cache", cache, scenario::dataset_folders(source));
    // Continued as a bisection's folder is: probes keep their sessions.
    claim.emplace(out, "qualify " + fs::absolute(o.scenario).lexically_normal().string(),
                  OutputDir::Reuse::kContinue);
    if (q.memory_asked()) memory_half(o, source, out, cache, q);
    if (reference) {
      q.numerics = numerics_half(o, source, std::move(*reference), out, cache, q.history);
      q.trial_count += static_cast<int64_t>(q.numerics->comparison.here_runs);
    }
    q.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    q.executor = probe::executor_description();
    const QualificationVerdict verdict = judge_qualification(q);
    write_qualification(out, q, verdict);
    std::cout << qualification_summary(q, verdict) << "\nreport: " << (out / "qualification.md").string()
              << std::endl;
    claim->commit();
    return verdict.qualifies() ? 0 : 1;
  });
}

}  // namespace dbh::harness::qualify
