#include "harness/common/home.h"
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

#include "harness/bisect/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/out_file.h"
#include "harness/qualify/search.h"
#include "harness/report/markdown_html.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// This qualification's command, to run again as pasted: the scenario by its
// absolute path, every override and every option that changes the answer.
std::vector<std::string> rerun_args(const QualifyOptions& o) {
  std::vector<std::string> args = {self_command(), "qualify", path_for_command(o.scenario)};
  args.insert(args.end(), o.overrides.begin(), o.overrides.end());
  args.insert(args.end(), {o.profile.empty() ? "--budget" : "--profile", o.profile.empty() ? o.budget : o.profile});
  if (o.steps != QualifyOptions{}.steps) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  if (o.margin != QualifyOptions{}.margin) {
    std::ostringstream margin;
    margin << o.margin;
    args.insert(args.end(), {"--margin", margin.str()});
  }
  if (o.host_estimate) args.push_back("--host-estimate");
  if (!o.cache_dir.empty()) args.insert(args.end(), {"--cache", o.cache_dir});
  return args;
}


using Trial = QualifyTrial;

Trial to_trial(const ProbeResult& p, int64_t batch, int64_t accumulation, const std::string& precision) {
  Trial t;
  t.batch = batch;
  t.accumulation = accumulation;
  t.precision = precision;
  t.passed = p.verdict == Verdict::kPass;
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
  if (p.analysis.budget.is_object()) t.context = p.analysis.budget.value("used_before", int64_t{0});
  return t;
}

std::string cmd(const std::string& scenario, const std::vector<std::string>& base, const std::vector<std::string>& extra) {
  std::vector<std::string> words = {self_command(), "run", path_for_command(scenario)};
  words.insert(words.end(), base.begin(), base.end());
  words.insert(words.end(), extra.begin(), extra.end());
  return shell_command(words);
}

}  // namespace

namespace {
// What the CUDA context and libraries took before training on the last GPU
// run (reports/examples/gpu/h100-2026-11-22, seed 003's memory_budget event:
// used_before).
constexpr int64_t kContextBytesH100 = 554500096;
}  // namespace

int qualify_command(const QualifyOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<OutputDir> claim;  // locked while written; removed unless it ends with a verdict
  return run_search(claim, [&]() -> int {
    const Scenario source = load_scenario(o.scenario, o.overrides);
    for (const auto& note : check_worker(source, {{capability::kMemoryBudget, "dbh qualify"}})) {
      std::cerr << "dbh qualify: note: " << note << "\n";
    }
    HardwareProfile profile;
    if (!o.profile.empty()) profile = load_profile(o.profile);
    int64_t budget = profile.memory_bytes;
    if (!o.budget.empty()) {
      const auto b = parse_bytes(o.budget);
      if (!b || *b <= 0) throw ScenarioError("qualify: --budget: expected a size such as 12GiB, got \"" + o.budget + "\"");
      budget = *b;
    }
    if (budget <= 0) throw ScenarioError("qualify: expected --profile NAME or --budget SIZE");
    // Note [A CPU answer to a GPU question]: host memory holds no CUDA
    // context, no cuDNN/cuBLAS workspace and no caching-allocator overhead,
    // so a GPU profile measured on the CPU answers another question.
    const bool gpu_profile = !o.profile.empty() && !profile.compute_capability.empty();
    const bool on_cpu = source.hardware.device == "cpu";
    if (gpu_profile && on_cpu && !o.host_estimate) {
      throw UsageError(
          "qualify --profile " + o.profile + ": expected a CUDA device to qualify a GPU (" + profile.display_name +
          "), got a scenario that trains on the CPU. Host memory holds no CUDA context, no cuDNN workspace and no "
          "allocator overhead (the CUDA context and libraries alone took " + format_bytes(kContextBytesH100) +
          " on the H100 of reports/examples/gpu/h100-2026-11-22), so the CPU cannot say whether it fits. On a GPU "
          "machine: " + shell_command({"dbh", "qualify", o.scenario, "--profile", o.profile,
                                       override_text(DBH_SCENARIO_KEY(hardware.device), "cuda")}) +
          "; here, for a host-memory estimate only: add --host-estimate");
    }
    if (o.host_estimate && !(gpu_profile && on_cpu)) {
      throw UsageError("qualify --host-estimate: expected a GPU profile (--profile) and a scenario on the CPU, got " +
                       std::string(gpu_profile ? "a scenario on " + source.hardware.device : "no GPU profile"));
    }
    const std::string estimate_note =
        o.host_estimate
            ? "a host-memory estimate, not a GPU answer: measured on the CPU, without the CUDA context, the "
              "cuDNN/cuBLAS workspaces and the caching allocator's overhead (the context and libraries alone took " +
                  format_bytes(kContextBytesH100) + " on the H100 of reports/examples/gpu/h100-2026-11-22; the "
                  "workspaces depend on the algorithms cuDNN picks on the card)"
            : "";
    if (!estimate_note.empty()) std::cerr << "dbh qualify: note: " << estimate_note << "\n";
    if (!(o.margin >= 0 && o.margin < 0.9)) {  // NaN fails too
      throw ScenarioError("qualify: --margin: expected a fraction in [0, 0.9), got " + std::to_string(o.margin));
    }
    const auto margined = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - o.margin));
    const int64_t effective = source.data.batch_size * source.train.accumulation;
    const fs::path out = o.out.empty() ? fs::path(default_output_folder(
                                             "qualify-" + fs::path(o.scenario).stem().string() + "-" +
                                             (o.profile.empty() ? "budget" : o.profile)))
                                       : fs::path(o.out);
    const std::string cache = o.cache_dir.empty() ? default_probe_cache() : o.cache_dir;
    check_outside_datasets("dbh qualify", "--out", out.string(), dataset_folders(source));
    check_outside_datasets("dbh qualify", "--cache", cache, dataset_folders(source));
    // Continued as a bisection's folder is: probes keep their sessions.
    claim.emplace(out, "qualify " + fs::absolute(o.scenario).lexically_normal().string(),
                  OutputDir::Reuse::kContinue);
    // The layout and threads are measured once, for the source setup, and
    // pinned for every trial: the search compares batches, not layouts, and
    // a measurement per batch would cost more than the trials.
    Scenario measured = source;
    const nlohmann::json choices = resolve_measured_choices(measured, (out / "tuning").string());
    std::vector<std::string> base_overrides = o.overrides;
    if (!choices.is_null()) {
      base_overrides.push_back(override_text(DBH_SCENARIO_KEY(train.channels_last),
                                             measured.train.channels_last.value_or(false) ? "true" : "false"));
      base_overrides.push_back(override_text(DBH_SCENARIO_KEY(train.threads),
                                             std::to_string(std::max<int64_t>(0, measured.train.threads))));
    }
    Prober prober(o.scenario, base_overrides, out.string(), cache, o.quiet);
    const bool cuda = source.hardware.device != "cpu";
    std::vector<std::string> precisions = {"fp32"};
    if (cuda) precisions = {"fp32", "fp16", "bf16"};
    // bf16 needs compute capability 8.0 (Ampere) on the target card; the
    // machine emulating it may have it, the target may not (a T4 is 7.5).
    std::string not_searched;
    if (cuda && !profile.compute_capability.empty() && std::atof(profile.compute_capability.c_str()) < 8.0) {
      precisions.pop_back();
      not_searched = "bf16 (the target's compute capability " + profile.compute_capability + " has no bf16; 8.0 needed)";
    }
    if (!o.quiet) {
      std::cout << "dbh qualify " << source.name << " for "
                << (o.profile.empty() ? "a budget" : profile.display_name) << ": " << format_bytes(budget)
                << " (" << format_bytes(margined) << " with a " << static_cast<int>(o.margin * 100)
                << "% safety margin), source effective batch " << effective << " (" << source.data.batch_size << " x "
                << source.train.accumulation << ")" << std::endl;
    }
    auto trial_overrides = [&](int64_t batch, int64_t accumulation, const std::string& precision, int64_t mem) {
      return std::vector<std::string>{override_text(DBH_SCENARIO_KEY(data.batch_size), std::to_string(batch)),
                                      override_text(DBH_SCENARIO_KEY(train.accumulation), std::to_string(accumulation)),
                                      override_text(DBH_SCENARIO_KEY(train.precision), precision),
                                      source.train.max_steps >= o.steps
                                          ? override_text(DBH_SCENARIO_KEY(train.stop_after), std::to_string(o.steps))
                                          : override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(o.steps)),
                                      override_text(DBH_SCENARIO_KEY(hardware.memory_budget), std::to_string(mem)),
                                      "controls=[]", override_text(DBH_SCENARIO_KEY(repeat.processes), "1"),
                                      override_text(DBH_SCENARIO_KEY(repeat.in_process), "1"),
                                      // one process compares nothing: no determinism to expect
                                      override_text(DBH_SCENARIO_KEY(expect.deterministic), "null")};
    };
    // Note [Affine memory model]: a step's peak memory is close to affine in
    // the micro-batch (weights, optimizer state and workspaces, plus
    // activations per sample). Two measured points predict the largest batch
    // within the margined budget and one fresh run confirms it; when the
    // prediction misses (an allocator that is not affine, a host limit on
    // address space rather than on resident memory) a binary search over the
    // batch is the fallback. The peak is the CUDA allocator's on a GPU (the
    // budget's ballast and context are outside it) and the process's on a CPU.
    auto peak_of = [&](const ProbeResult& p) -> int64_t {
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
                                  std::to_string(source.train.accumulation) + " " + source.train.precision;
    const ProbeResult source_probe =
        prober.probe_fresh(trial_overrides(source.data.batch_size, source.train.accumulation, source.train.precision,
                                           budget),
                           "source config " + src_label + " under the budget");
    Trial source_trial = to_trial(source_probe, source.data.batch_size, source.train.accumulation,
                                  source.train.precision);
    source_trial.peak = peak_of(source_probe);
    int64_t trials = 1;
    const bool source_out_of_memory = !source_trial.passed && is_memory_exhaustion(source_trial.klass);
    // What the source needs: its peak when it fits, else predicted from its
    // precision's line (set below) when that precision has one.
    int64_t source_need = source_trial.passed ? source_trial.peak : 0;

    ojson per_precision = ojson::array();
    std::vector<Trial> searched;
    using Rec = PrecisionSearchResult;
    std::vector<Rec> recs;
    for (const auto& precision : precisions) {
      PrecisionSearchInput in;
      in.precision = precision;
      in.effective = effective;
      in.source_batch = source.data.batch_size;
      in.source_accumulation = source.train.accumulation;
      in.source_precision = source.train.precision;
      in.source = source_trial;
      in.source_out_of_memory = source_out_of_memory;
      in.budget = budget;
      in.margined = margined;
      PrecisionSearchTrials run;
      run.measure = [&](int64_t b) {
        const auto p = prober.probe(trial_overrides(b, 1, precision, margined),
                                    precision + " batch " + std::to_string(b) + " (margined budget)");
        Trial t = to_trial(p, b, 1, precision);
        t.peak = peak_of(p);
        return t;
      };
      run.confirm = [&](int64_t batch, int64_t accumulation) {
        // A confirmation runs fresh: never answered from a cache.
        const auto p = prober.probe_fresh(trial_overrides(batch, accumulation, precision, budget),
                                          "confirm " + precision + " " + std::to_string(batch) + "x" +
                                              std::to_string(accumulation));
        Trial t = to_trial(p, batch, accumulation, precision);
        t.peak = peak_of(p);
        return t;
      };
      Rec rec = search_precision(in, run);
      searched.insert(searched.end(), rec.measured.begin(), rec.measured.end());
      if (rec.source_need) source_need = *rec.source_need;
      trials += rec.probes;
      recs.push_back(std::move(rec));
    }
    // Recommend the source's precision when it qualifies (the numerics stay
    // as they were); otherwise the confirmed precision with the highest
    // throughput on this machine.
    const Rec* best = nullptr;
    for (const auto& r : recs) {
      if (r.confirmed && r.precision == source.train.precision) best = &r;
    }
    for (const auto& r : recs) {
      if (best != nullptr && best->precision == source.train.precision) break;
      if (!r.confirmed) continue;
      auto rate = [&](const Rec& x) {
        return x.confirm.step_seconds > 0 ? static_cast<double>(effective) / x.confirm.step_seconds : 0.0;
      };
      if (best == nullptr || rate(r) > rate(*best)) best = &r;
    }
    const bool qualifies = best != nullptr;
    // What the target keeps free at a peak of `r`'s precision: the budget
    // less the allocator's peak and what was in use before it.
    auto headroom = [&](const Rec& r, int64_t peak) { return budget - r.context - peak; };
    // A trial that failed for another reason than memory (a NaN, a crash):
    // whether a batch fits the budget is then not what was measured.
    std::string other_failure;
    {
      std::vector<const Trial*> failed = {&source_trial};
      for (const auto& t : searched) failed.push_back(&t);
      for (const Trial* t : failed) {
        if (!t->passed && !t->klass.empty() && !is_memory_exhaustion(t->klass) && other_failure.empty()) {
          other_failure = t->klass + " at batch " + std::to_string(t->batch) + " (" + t->precision + ")";
        }
      }
    }

    // Plot: peak memory of every batch that ran, per precision, at its batch
    // size; failed trials marked where they ran; the recommended setup ringed
    // (Note [Plots that tell the truth]).
    {
      PlotOptions plot;
      plot.title = "Peak memory by batch size";
      plot.x_label = "batch size (per step; accumulation makes up the effective batch of " +
                     std::to_string(effective) + ")";
      plot.y_label = "MiB";
      plot.integer_x = true;
      std::vector<PlotSeries> lines;
      for (const auto& precision : precisions) {
        std::map<int64_t, const Trial*> ran;  // the last trial at each batch
        if (source_trial.precision == precision) ran[source_trial.batch] = &source_trial;
        for (const auto& t : searched) {
          if (t.precision == precision) ran[t.batch] = &t;
        }
        for (const auto& r : recs) {
          if (r.precision == precision && r.confirm.batch > 0 && !r.confirm.precision.empty()) {
            ran[r.confirm.batch] = &r.confirm;
          }
        }
        PlotSeries line;
        line.name = precision + " peak";
        for (const auto& [batch, t] : ran) {
          if (t->passed && t->peak > 0) {
            line.x.push_back(static_cast<double>(batch));
            line.y.push_back(static_cast<double>(t->peak) / 1048576.0);
          } else if (!t->passed) {
            line.failed_x.push_back(static_cast<double>(batch));
          }
        }
        lines.push_back(std::move(line));
      }
      double max_batch_ran = 1;
      for (const auto& l : lines) {
        for (const double x : l.x) max_batch_ran = std::max(max_batch_ran, x);
        for (const double x : l.failed_x) max_batch_ran = std::max(max_batch_ran, x);
      }
      PlotSeries budget_line;
      budget_line.name = "budget " + format_bytes(budget);
      budget_line.reference = true;
      budget_line.x = {1.0, max_batch_ran};
      budget_line.y = {static_cast<double>(budget) / 1048576.0, static_cast<double>(budget) / 1048576.0};
      lines.push_back(std::move(budget_line));
      if (best != nullptr && best->confirm.passed && best->confirm.peak > 0) {
        plot.highlight = std::make_pair(static_cast<double>(best->confirm.batch),
                                        static_cast<double>(best->confirm.peak) / 1048576.0);
        plot.highlight_label = "recommended: batch " + std::to_string(best->confirm.batch) + " x " +
                               std::to_string(best->confirm.accumulation) + " accumulation, " + best->precision;
      }
      write_plot((out / "memory_vs_batch.png").string(), plot, lines);
    }

    const std::string title = "Hardware Qualification Report: " + source.name + " on " +
                              (o.profile.empty() ? format_bytes(budget) : profile.display_name);
    std::ostringstream md;
    md << "---\ntitle: " << front_matter_string(title) << "\ntype: \"qualification\"\nverdict: \""
       << (qualifies ? "qualifies" : "does not qualify") << "\"\n---\n\n";
    md << "# Hardware Qualification Report\n\n";
    if (!estimate_note.empty()) md << "> **Estimate.** This is " << estimate_note << ".\n\n";
    md << "**Verdict: " << (qualifies ? "QUALIFIES" : "DOES NOT QUALIFY") << (estimate_note.empty() ? "" : " (host-memory estimate)") << ".** ";
    if (qualifies) {
      md << "Train with batch " << best->confirm.batch << " × " << best->confirm.accumulation << " accumulation ("
         << best->precision << "), keeping the effective batch of " << effective << ": it trained " << o.steps
         << " steps with a peak of " << format_bytes(best->confirm.peak) << ", leaving "
         << format_bytes(headroom(*best, best->confirm.peak)) << " of headroom.\n\n";
    } else if (!other_failure.empty()) {
      md << "Not answered: training fails for a reason other than memory (`" << other_failure
         << "`), so whether a batch fits the budget was not measured. Fix that first (`dbh diagnose`).\n\n";
    } else {
      md << "No batch size trains within the budget even with accumulation.\n\n";
    }
    md << "- Target: " << (o.profile.empty() ? "explicit budget" : profile.display_name + " (" + profile.name + ")") << ", "
       << format_bytes(budget) << (profile.notes.empty() ? "" : "; " + profile.notes) << "\n"
       << "- Safety margin: " << static_cast<int>(o.margin * 100) << "% (searches run within " << format_bytes(margined) << ")\n"
       << (not_searched.empty() ? std::string() : "- Not searched: " + not_searched + "\n")
       << "- Step times are this machine's; memory is what the target would need\n"
       << (choices.is_null() ? std::string()
                             : "- Layout and threads (for every trial): " + measured_choices_line(choices) + "\n")
       << "- Device: " << source.hardware.device
       << (cuda ? " (budget enforced with a ballast outside the allocator plus the allocator limit)"
                : " (budget enforced as a host memory limit, RLIMIT_DATA)")
       << "\n- Source setup: batch " << source.data.batch_size << " × " << source.train.accumulation << " ("
       << source.train.precision << "), " << source.data.size << " px, resnet" << source.model.encoder << " + "
       << source.model.decoder << ": " << (source_trial.passed ? "fits" : "does NOT fit") << " ("
       << source_trial.outcome << (source_trial.klass.empty() ? "" : " " + source_trial.klass) << ")\n\n";
    md << "| precision | largest batch | peak at that batch | headroom | step time | recommended | confirmed |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const auto& r : recs) {
      md << "| " << r.precision << " | " << r.max_batch << (r.max_batch && !r.max_measured ? " (predicted)" : "") << " | "
         << (r.max_batch ? format_bytes(r.at_max.peak) : "-")
         << " | " << (r.max_batch ? format_bytes(headroom(r, r.at_max.peak)) : "-") << " | "
         << (r.max_batch ? std::to_string(static_cast<int>(r.at_max.step_seconds * 1000)) + " ms" : "-") << " | "
         << (r.max_batch ? std::to_string(r.confirm.batch) + " × " + std::to_string(r.confirm.accumulation) : "-")
         << " | " << (r.confirmed ? "yes" : "no") << " |\n";
    }
    md << "\nTrials: " << trials << ".";
    for (const auto& r : recs) {
      md << " " << r.precision << ": " << (r.method.empty() ? "nothing fits" : r.method);
      if (r.bytes_per_sample > 0) {
        md << " (" << format_bytes(r.fixed_bytes) << " + " << format_bytes(static_cast<int64_t>(r.bytes_per_sample))
           << " per sample)";
      }
      if (!r.how.empty()) md << "; " << r.how;
      md << ";";
    }
    md << " Largest batches come from the model when it was confirmed; peaks at them are measured where a trial ran "
          "there and predicted otherwise.\n";
    md << "\n![Peak memory by batch size (memory_vs_batch.png)](memory_vs_batch.png)\n\nEvery trial: "
          "`qualification.json`.\n\n## Commands\n\n```sh\n";
    if (qualifies) {
      md << "# recommended\n"
         << cmd(o.scenario, o.overrides,
                {override_text(DBH_SCENARIO_KEY(data.batch_size), std::to_string(best->confirm.batch)),
                 override_text(DBH_SCENARIO_KEY(train.accumulation), std::to_string(best->confirm.accumulation)),
                 override_text(DBH_SCENARIO_KEY(train.precision), best->precision)})
         << "\n";
    }
    md << "# re-run this qualification\n" << shell_command(rerun_args(o)) << "\n```\n\n";
    // The checklist's batch is the recommended precision's (the first
    // precision's when none qualifies), so step 3 names one setup.
    const Rec* adjusted = qualifies ? best : (recs.empty() ? nullptr : &recs.front());
    md << "## Migration checklist (measured)\n\n"
       << "1. **Profile memory on the source setup:** batch " << source.data.batch_size << " × "
       << source.train.accumulation
       << (source_trial.passed ? " peaks at " + format_bytes(source_need) + " on this machine (it fits)"
           : source_need > 0
               ? " needs about " + format_bytes(source_need) + " (predicted by the line above; under the budget it " +
                     source_trial.outcome + " " + source_trial.klass + ")"
               : " " + source_trial.outcome + (source_trial.klass.empty() ? "" : " " + source_trial.klass) +
                     " under the budget")
       << ".\n"
       << "2. **Target capacity:** " << format_bytes(budget) << "; with a " << static_cast<int>(o.margin * 100)
       << "% margin " << format_bytes(margined) << " is usable.\n"
       << "3. **Adjust the batch:** largest stable batch "
       << (adjusted ? adjusted->max_batch : 0) << " (" << (adjusted ? adjusted->precision : "") << ")"
       << (qualifies ? "; use " + std::to_string(best->confirm.batch) + " × " + std::to_string(best->confirm.accumulation) +
                           " to keep the effective batch of " + std::to_string(effective)
                     : "")
       << ".\n"
       << "4. **Test with the minimal config first:** the recommended configuration trained " << o.steps << " steps: "
       << (qualifies ? "passed" : "failed") << ".\n"
       << "5. **Monitor memory:** per-step and per-phase memory is in each trial's report (`probes/*/probe-*/events.jsonl`); "
          "keep `dbh run` in CI with `expect.max_peak_memory`.\n";
    write_file_atomically((out / "qualification.md").string(), md.str());
    write_file_atomically((out / "qualification.html").string(), markdown_page_html(title, md.str(), out.string()));
    ojson j;
    j["schema_version"] = 1;
    j["scenario"] = o.scenario;
    j["profile"] = o.profile;
    j["budget_bytes"] = budget;
    j["host_estimate"] = estimate_note.empty() ? ojson(nullptr) : ojson(estimate_note);
    j["margin"] = o.margin;
    j["effective_batch"] = effective;
    j["qualifies"] = qualifies;
    j["source"] = {{"batch", source_trial.batch}, {"accumulation", source_trial.accumulation},
                   {"passed", source_trial.passed}, {"outcome", source_trial.outcome},
                   {"class", source_trial.klass}, {"need_bytes", source_need},
                   {"need", source_trial.passed ? "measured" : source_need > 0 ? "predicted" : "unknown"}};
    j["precisions"] = ojson::array();
    if (!not_searched.empty()) j["not_searched"] = not_searched;
    for (const auto& r : recs) {
      j["precisions"].push_back({{"precision", r.precision}, {"max_batch", r.max_batch},
                                 {"peak_bytes", r.at_max.peak}, {"step_seconds", r.at_max.step_seconds},
                                 {"recommended", {{"batch", r.confirm.batch}, {"accumulation", r.confirm.accumulation}}},
                                 {"confirmed", r.confirmed}, {"probes", r.probes}, {"method", r.method},
                                 {"max_batch_measured", r.max_measured}, {"how", r.how},
                                 {"model", {{"fixed_bytes", r.fixed_bytes}, {"bytes_per_sample", r.bytes_per_sample}}}});
    }
    if (qualifies) {
      j["recommendation"] = {{"precision", best->precision}, {"batch", best->confirm.batch},
                             {"accumulation", best->confirm.accumulation}, {"peak_bytes", best->confirm.peak},
                             {"headroom_bytes", headroom(*best, best->confirm.peak)}};
    }
    j["measured_choices"] = ojson::parse(
        choices.is_null() ? "null" : choices.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    j["trial_count"] = trials;
    j["trials"] = ojson::array();
    for (const auto& p : prober.history()) {
      j["trials"].push_back({{"what", p.what}, {"outcome", to_string(p.analysis.outcome)},
                             {"class", p.analysis.failure.klass}, {"peak_bytes", p.analysis.peak_memory_bytes},
                             {"seconds", p.seconds}, {"cached", p.cached}});
    }
    j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomically((out / "qualification.json").string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    j["failure_not_memory"] = other_failure.empty() ? ojson(nullptr) : ojson(other_failure);
    write_file_atomically((out / "qualification.json").string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    std::cout << (qualifies ? "QUALIFIES: " : other_failure.empty() ? "DOES NOT QUALIFY" : "DOES NOT QUALIFY (not answered: ") ;
    if (!qualifies && !other_failure.empty()) std::cout << "training fails for another reason than memory, " << other_failure << ")";
    if (qualifies) {
      std::cout << "batch " << best->confirm.batch << " x " << best->confirm.accumulation << " accumulation ("
                << best->precision << "), peak " << format_bytes(best->confirm.peak) << ", headroom "
                << format_bytes(headroom(*best, best->confirm.peak));
    }
    if (!estimate_note.empty()) std::cout << " (host-memory estimate: no CUDA context, cuDNN workspace or allocator overhead)";
    std::cout << "\nreport: " << (out / "qualification.md").string() << std::endl;
    claim->commit();
    return qualifies ? 0 : 1;
  });
}

}  // namespace dbh::harness
