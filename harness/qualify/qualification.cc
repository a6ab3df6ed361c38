#include "harness/qualify/qualification.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/report/markdown_html.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::qualify {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

QualificationVerdict judge_qualification(const Qualification& q) {
  QualificationVerdict v;
  const auto& recs = q.searches;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].confirmed && recs[i].precision == q.source.precision) v.best = i;
  }
  const auto rate = [&](const PrecisionSearchResult& x) {
    return x.confirm.step_seconds > 0 ? static_cast<double>(q.effective) / x.confirm.step_seconds : 0.0;
  };
  if (!v.best) {
    for (size_t i = 0; i < recs.size(); ++i) {
      if (recs[i].confirmed && (!v.best || rate(recs[i]) > rate(recs[*v.best]))) v.best = i;
    }
  }
  std::vector<const QualifyTrial*> ran = {&q.source};
  for (const auto& r : recs) {
    for (const auto& t : r.measured) ran.push_back(&t);
  }
  for (const QualifyTrial* t : ran) {
    if (!q.memory_asked()) break;
    if (!t->passed && !t->klass.empty() && !supervisor::is_memory_exhaustion(t->klass)) {
      v.other_failure = t->klass + " at batch " + std::to_string(t->batch) + " (" + t->precision + ")";
      break;
    }
  }
  v.memory_asked = q.memory_asked();
  if (q.numerics) v.numerics_same = q.numerics->failed_here.empty() && q.numerics->comparison.same();
  return v;
}

std::string QualificationVerdict::failed_halves() const {
  const bool memory = memory_asked && !best.has_value(), numbers = !numerics_same.value_or(true);
  return memory && numbers ? "memory and numerics" : memory ? "memory" : numbers ? "numerics" : "";
}

int64_t qualification_headroom(const Qualification& q, const PrecisionSearchResult& r, int64_t peak) {
  return q.budget - r.context - peak;
}

namespace {

// `dbh run` of the qualified scenario with `extra` overrides after the user's.
std::string run_command(const Qualification& q, const std::vector<std::string>& extra) {
  std::vector<std::string> words = {self_command(), "run", path_for_command(q.scenario)};
  words.insert(words.end(), q.overrides.begin(), q.overrides.end());
  words.insert(words.end(), extra.begin(), extra.end());
  return shell_command(words);
}

// Peak memory of every batch that ran, per precision, at its batch size;
// failed trials marked where they ran; the recommended setup ringed (Note
// [Plots that tell the truth]).
void write_memory_plot(const fs::path& file, const Qualification& q, const QualificationVerdict& v) {
  report::PlotOptions plot;
  plot.title = "Peak memory by batch size";
  plot.x_label = "batch size (per step; accumulation makes up the effective batch of " + std::to_string(q.effective) +
                 ")";
  plot.y_label = "MiB";
  plot.integer_x = true;
  std::vector<report::PlotSeries> lines;
  for (const auto& precision : q.precisions) {
    std::map<int64_t, const QualifyTrial*> ran;  // the last trial at each batch
    if (q.source.precision == precision) ran[q.source.batch] = &q.source;
    for (const auto& r : q.searches) {
      for (const auto& t : r.measured) {
        if (t.precision == precision) ran[t.batch] = &t;
      }
    }
    for (const auto& r : q.searches) {
      if (r.precision == precision && r.confirm.batch > 0 && !r.confirm.precision.empty()) {
        ran[r.confirm.batch] = &r.confirm;
      }
    }
    report::PlotSeries line;
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
  report::PlotSeries budget_line;
  budget_line.name = "budget " + scenario::format_bytes(q.budget);
  budget_line.reference = true;
  budget_line.x = {1.0, max_batch_ran};
  budget_line.y = {static_cast<double>(q.budget) / 1048576.0, static_cast<double>(q.budget) / 1048576.0};
  lines.push_back(std::move(budget_line));
  if (v.best) {
    const auto& best = q.searches[*v.best];
    if (best.confirm.passed && best.confirm.peak > 0) {
      plot.highlight = std::make_pair(static_cast<double>(best.confirm.batch),
                                      static_cast<double>(best.confirm.peak) / 1048576.0);
      plot.highlight_label = "recommended: batch " + std::to_string(best.confirm.batch) + " x " +
                             std::to_string(best.confirm.accumulation) + " accumulation, " + best.precision;
    }
  }
  report::write_plot(file.string(), plot, lines);
}

// The numerics half in one line (Note [A numerics reference]).
std::string numerics_verdict(const Qualification::Numerics& n) {
  if (!n.failed_here.empty()) return "not compared: the training did not train to the end here (" + n.failed_here + ")";
  return numerics::verdict_line(n.comparison);
}

// A value of a side's machine, for the table; "-" when it has none.
std::string machine_value(const nlohmann::json& m, const std::string& key) {
  const nlohmann::json* v = &m;
  std::string rest = key;
  while (!rest.empty()) {
    const auto dot = rest.find('.');
    const std::string part = rest.substr(0, dot);
    if (!v->is_object() || !v->contains(part)) return "-";
    v = &(*v)[part];
    rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
  }
  if (v->is_string()) return v->get<std::string>().empty() ? "-" : v->get<std::string>();
  if (v->is_array()) {
    std::string out;
    for (const auto& x : *v) out += (out.empty() ? "" : ", ") + (x.is_string() ? x.get<std::string>() : x.dump());
    return out.empty() ? "-" : out;
  }
  return v->dump();
}

// Each side's per-step loss (its mean over the runs) and the band around the
// reference the other side may lie in (Note [Plots that tell the truth]).
void write_numerics_plot(const fs::path& file, const Qualification::Numerics& n) {
  report::PlotOptions plot;
  plot.title = "Loss per step: reference and this machine";
  plot.y_label = "loss";
  plot.integer_x = true;
  report::PlotSeries reference{"reference (" + std::to_string(n.comparison.reference_runs) + " run(s), mean)", {}, {}, {}, false};
  report::PlotSeries here{"this machine (" + std::to_string(n.comparison.here_runs) + " run(s), mean)", {}, {}, {}, false};
  report::PlotSeries lo{"noise band, lower edge", {}, {}, {}, true}, hi{"noise band, upper edge", {}, {}, {}, true};
  for (const auto& p : n.comparison.loss) {
    const double x = static_cast<double>(p.step);
    reference.x.push_back(x);
    reference.y.push_back((p.reference_lo + p.reference_hi) / 2);
    here.x.push_back(x);
    here.y.push_back((p.here_lo + p.here_hi) / 2);
    lo.x.push_back(x);
    lo.y.push_back(p.band_lo);
    hi.x.push_back(x);
    hi.y.push_back(p.band_hi);
  }
  std::vector<report::PlotSeries> lines = {reference, here, lo, hi};
  if (n.comparison.departure) {
    const auto& d = *n.comparison.departure;
    for (const auto& p : n.comparison.loss) {
      if (p.step == d.step) plot.highlight = std::make_pair(static_cast<double>(p.step), (p.here_lo + p.here_hi) / 2);
    }
    plot.highlight_label = "departs at step " + std::to_string(d.step) + " (" + d.quantity + ")";
  }
  report::write_plot(file.string(), plot, lines);
}

// The numerics half's section of qualification.md.
std::string numerics_markdown(const Qualification& q, const Qualification::Numerics& n) {
  const auto& c = n.comparison;
  std::ostringstream md;
  md << "## Numerics: does it train the same?\n\n" << numerics_verdict(n) << ".\n\n";
  md << "The reference " << markdown_code(n.reference_file) << " was recorded on " << markdown_inline(n.reference.recorded_at.empty() ? "an unknown date" : n.reference.recorded_at)
     << " from scenario " << markdown_code(n.reference.scenario)
     << (n.reference.scenario_hash.empty() ? std::string() : " (" + n.reference.scenario_hash.substr(0, 12) + ")")
     << "; the same first " << c.steps << " step(s) ran here in " << c.here_runs + c.replays
     << " fresh process(es)"
     << (c.replays > 0 ? ", " + std::to_string(c.replays) + " of them starting every step from the state the "
                         "reference's first process started it from (`" + n.reference_file +
                         numerics::kStatesSuffix + "`), so that each step is compared from the same parameters"
                       : std::string())
     << ". The processes of each side compute differently on purpose, as machines do (one intra-op thread, "
        "another CPU instruction set, cuDNN's other algorithms): the noise of a quantity is the spread its values "
        "showed across them (times "
     << c.tolerance.spread_factor << "), never less than " << c.tolerance.relative_floor
     << " relative: the widest was " << std::setprecision(3) << c.largest_noise << ".\n\n";
  md << "| process | reference | this machine |\n|---|---|---|\n";
  const auto& here_runs = n.here.runs;
  const size_t rows = std::max({n.reference.side.runs.size(), here_runs.size(), n.here.replays.size()});
  for (size_t i = 0; i < rows; ++i) {
    const auto variant = [](const std::vector<numerics::RunNumbers>& runs, size_t k, const char* kind) {
      return k < runs.size() ? kind + (runs[k].variant.empty() ? std::string("as configured") : runs[k].variant)
                             : std::string("-");
    };
    std::string here_cell = variant(here_runs, i, "free: ");
    if (i < n.here.replays.size()) {
      here_cell = (i < here_runs.size() ? here_cell + "; " : std::string()) + variant(n.here.replays, i, "from its state: ");
    }
    md << "| " << i + 1 << " | " << markdown_inline(variant(n.reference.side.runs, i, "")) << " | "
       << markdown_inline(here_cell) << " |\n";
  }
  md << "\n";
  md << "| | reference | this machine |\n|---|---|---|\n";
  for (const auto& [label, key] : std::vector<std::pair<std::string, std::string>>{
           {"host", "host"}, {"CPU", "cpu"}, {"cores", "cores"}, {"GPUs", "gpus"}, {"worker", "worker"},
           {"torch", "ran_with.torch"}, {"device", "ran_with.device"}, {"threads", "ran_with.threads"},
           {"ATEN_CPU_CAPABILITY", "ATEN_CPU_CAPABILITY"}, {"OMP_NUM_THREADS", "OMP_NUM_THREADS"}}) {
    md << "| " << label << " | " << markdown_inline(machine_value(n.reference.side.machine, key)) << " | "
       << markdown_inline(machine_value(n.here.machine, key)) << " |\n";
  }
  md << "\n";
  if (c.departure) {
    const auto& d = *c.departure;
    md << "First departure: step " << d.step << ", " << markdown_inline(d.quantity)
       << (d.same_state ? " (from the same state)" : " (the free runs)") << ": " << d.here
       << " here against " << d.reference << " in the reference, apart by " << d.by
       << " (relative) where the noise is " << d.noise << ". Everything before it, in the order the step computes "
          "it (each module's output in forward order, the loss, each module's gradient in backward order, the "
          "gradient norm), agreed within its noise.\n\n";
  }
  for (const auto& note : c.notes) md << "- " << markdown_inline(note) << "\n";
  if (!c.notes.empty()) md << "\n";
  md << "![Loss per step: reference and this machine (numerics_loss.png)](numerics_loss.png)\n\n"
     << "Record a reference again on the source machine:\n\n```sh\n" << n.rerun_reference << "\n```\n\n";
  (void)q;
  return md.str();
}

std::string qualification_title(const Qualification& q) {
  return "Hardware Qualification Report: " + q.scenario_name + " on " +
         (!q.profile.empty()  ? q.target_name
          : q.memory_asked() ? scenario::format_bytes(q.budget)
                             : "this machine against " + q.numerics->reference_file);
}

std::string qualification_markdown(const Qualification& q, const QualificationVerdict& v) {
  const bool qualifies = v.memory_fits();
  const PrecisionSearchResult* best = v.best ? &q.searches[*v.best] : nullptr;
  const auto& src = q.source;
  const int margin_pct = static_cast<int>(q.margin * 100);
  std::ostringstream md;
  md << "---\ntitle: " << report::front_matter_string(qualification_title(q)) << "\ntype: \"qualification\"\nverdict: \""
     << (v.qualifies() ? "qualifies" : "does not qualify") << "\"\n---\n\n";
  md << "# Hardware Qualification Report\n\n";
  if (!q.estimate_note.empty()) md << "> **Estimate.** This is " << q.estimate_note << ".\n\n";
  md << "**Verdict: " << (v.qualifies() ? "QUALIFIES" : "DOES NOT QUALIFY")
     << (q.estimate_note.empty() ? "" : " (host-memory estimate)")
     << (v.qualifies() ? std::string() : " (" + v.failed_halves() + ")") << ".**\n\n";
  if (q.numerics) md << "- Numerics: " << numerics_verdict(*q.numerics) << "\n";
  if (!q.memory_asked()) {
    md << "- Memory: not asked (no --profile or --budget)\n\n";
    if (q.numerics) md << numerics_markdown(q, *q.numerics);
    md << "## Commands\n\n```sh\n# re-run this qualification\n" << q.rerun_command << "\n```\n";
    return md.str();
  }
  md << "- Memory: ";
  if (qualifies) {
    md << "Train with batch " << best->confirm.batch << " × " << best->confirm.accumulation << " accumulation ("
       << best->precision << "), keeping the effective batch of " << q.effective << ": it trained " << q.steps
       << " steps with a peak of " << scenario::format_bytes(best->confirm.peak) << ", leaving "
       << scenario::format_bytes(qualification_headroom(q, *best, best->confirm.peak)) << " of headroom.\n\n";
  } else if (!v.other_failure.empty()) {
    md << "Not answered: training fails for a reason other than memory (`" << v.other_failure
       << "`), so whether a batch fits the budget was not measured. Fix that first (`dbh diagnose`).\n\n";
  } else {
    md << "No batch size trains within the budget even with accumulation.\n\n";
  }
  md << "- Target: " << (q.profile.empty() ? "explicit budget" : q.target_name + " (" + q.profile + ")") << ", "
     << scenario::format_bytes(q.budget) << (q.target_notes.empty() ? "" : "; " + q.target_notes) << "\n"
     << "- Safety margin: " << margin_pct << "% (searches run within " << scenario::format_bytes(q.margined) << ")\n"
     << (q.not_searched.empty() ? std::string() : "- Not searched: " + q.not_searched + "\n")
     << (q.executor == "local" ? "- Step times are this machine's; memory is what the target would need\n"
                               : "- Trials ran on " + q.executor + "; step times are its nodes'; memory is what the "
                                 "target would need\n")
     << (q.choices.is_null() ? std::string()
                             : "- Layout and threads (for every trial): " + report::measured_choices_line(q.choices) + "\n")
     << "- Device: " << q.device
     << (q.cuda() ? " (budget enforced with a ballast outside the allocator plus the allocator limit)"
                  : " (budget enforced as a host memory limit, RLIMIT_DATA)")
     << "\n- Source setup: batch " << src.batch << " × " << src.accumulation << " (" << src.precision << "), "
     << q.size << " px, resnet" << q.encoder << " + " << q.decoder << ": " << (src.passed ? "fits" : "does NOT fit")
     << " (" << src.outcome << (src.klass.empty() ? "" : " " + src.klass) << ")\n\n";
  md << "| precision | largest batch | peak at that batch | headroom | step time | recommended | confirmed |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const auto& r : q.searches) {
    md << "| " << r.precision << " | " << r.max_batch << (r.max_batch && !r.max_measured ? " (predicted)" : "")
       << " | " << (r.max_batch ? scenario::format_bytes(r.at_max.peak) : "-") << " | "
       << (r.max_batch ? scenario::format_bytes(qualification_headroom(q, r, r.at_max.peak)) : "-") << " | "
       << (r.max_batch ? std::to_string(static_cast<int>(r.at_max.step_seconds * 1000)) + " ms" : "-") << " | "
       << (r.max_batch ? std::to_string(r.confirm.batch) + " × " + std::to_string(r.confirm.accumulation) : "-")
       << " | " << (r.confirmed ? "yes" : "no") << " |\n";
  }
  md << "\nTrials: " << q.trial_count << ".";
  for (const auto& r : q.searches) {
    md << " " << r.precision << ": " << (r.method.empty() ? "nothing fits" : r.method);
    if (r.bytes_per_sample > 0) {
      md << " (" << scenario::format_bytes(r.fixed_bytes) << " + " << scenario::format_bytes(static_cast<int64_t>(r.bytes_per_sample))
         << " per sample)";
    }
    if (!r.how.empty()) md << "; " << r.how;
    md << ";";
  }
  md << " Largest batches come from the model when it was confirmed; peaks at them are measured where a trial ran "
        "there and predicted otherwise.\n";
  md << "\n![Peak memory by batch size (memory_vs_batch.png)](memory_vs_batch.png)\n\nEvery trial: "
        "`qualification.json`.\n\n";
  if (q.numerics) md << numerics_markdown(q, *q.numerics);
  md << "## Commands\n\n```sh\n";
  if (qualifies) {
    md << "# recommended\n"
       << run_command(q, {scenario::override_text(DBH_SCENARIO_KEY(data.batch_size), std::to_string(best->confirm.batch)),
                          scenario::override_text(DBH_SCENARIO_KEY(train.accumulation),
                                        std::to_string(best->confirm.accumulation)),
                          scenario::override_text(DBH_SCENARIO_KEY(train.precision), best->precision)})
       << "\n";
  }
  md << "# re-run this qualification\n" << q.rerun_command << "\n```\n\n";
  // The checklist's batch is the recommended precision's (the first
  // precision's when none qualifies), so step 3 names one setup.
  const PrecisionSearchResult* adjusted = qualifies ? best : (q.searches.empty() ? nullptr : &q.searches.front());
  md << "## Migration checklist (measured)\n\n"
     << "1. **Profile memory on the source setup:** batch " << src.batch << " × " << src.accumulation
     << (src.passed ? " peaks at " + scenario::format_bytes(q.source_need) + " on this machine (it fits)"
         : q.source_need > 0
             ? " needs about " + scenario::format_bytes(q.source_need) + " (predicted by the line above; under the budget it " +
                   src.outcome + " " + src.klass + ")"
             : " " + src.outcome + (src.klass.empty() ? "" : " " + src.klass) + " under the budget")
     << ".\n"
     << "2. **Target capacity:** " << scenario::format_bytes(q.budget) << "; with a " << margin_pct << "% margin "
     << scenario::format_bytes(q.margined) << " is usable.\n"
     << "3. **Adjust the batch:** largest stable batch " << (adjusted ? adjusted->max_batch : 0) << " ("
     << (adjusted ? adjusted->precision : "") << ")"
     << (qualifies ? "; use " + std::to_string(best->confirm.batch) + " × " +
                         std::to_string(best->confirm.accumulation) + " to keep the effective batch of " +
                         std::to_string(q.effective)
                   : "")
     << ".\n"
     << "4. **Test with the minimal config first:** the recommended configuration trained " << q.steps << " steps: "
     << (qualifies ? "passed" : "failed") << ".\n"
     << "5. **Monitor memory:** per-step and per-phase memory is in each trial's report "
        "(`probes/*/probe-*/events.jsonl`); keep `dbh run` in CI with `expect.max_peak_memory`.\n";
  return md.str();
}

ojson qualification_json(const Qualification& q, const QualificationVerdict& v) {
  const auto& src = q.source;
  ojson j;
  j["schema_version"] = 1;
  j["scenario"] = q.scenario;
  j["profile"] = q.profile;
  j["budget_bytes"] = q.budget;
  j["host_estimate"] = q.estimate_note.empty() ? ojson(nullptr) : ojson(q.estimate_note);
  j["margin"] = q.margin;
  j["effective_batch"] = q.effective;
  j["qualifies"] = v.qualifies();
  j["source"] = {{"batch", src.batch},       {"accumulation", src.accumulation},
                 {"passed", src.passed},     {"outcome", src.outcome},
                 {"class", src.klass},       {"need_bytes", q.source_need},
                 {"need", src.passed ? "measured" : q.source_need > 0 ? "predicted" : "unknown"}};
  j["precisions"] = ojson::array();
  if (!q.not_searched.empty()) j["not_searched"] = q.not_searched;
  for (const auto& r : q.searches) {
    j["precisions"].push_back({{"precision", r.precision}, {"max_batch", r.max_batch},
                               {"peak_bytes", r.at_max.peak}, {"step_seconds", r.at_max.step_seconds},
                               {"recommended", {{"batch", r.confirm.batch}, {"accumulation", r.confirm.accumulation}}},
                               {"confirmed", r.confirmed}, {"probes", r.probes}, {"method", r.method},
                               {"max_batch_measured", r.max_measured}, {"how", r.how},
                               {"model", {{"fixed_bytes", r.fixed_bytes}, {"bytes_per_sample", r.bytes_per_sample}}}});
  }
  if (v.best) {
    const auto& best = q.searches[*v.best];
    j["recommendation"] = {{"precision", best.precision}, {"batch", best.confirm.batch},
                           {"accumulation", best.confirm.accumulation}, {"peak_bytes", best.confirm.peak},
                           {"headroom_bytes", qualification_headroom(q, best, best.confirm.peak)}};
  }
  j["measured_choices"] = ojson::parse(
      q.choices.is_null() ? "null" : q.choices.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  j["trial_count"] = q.trial_count;
  j["trials"] = ojson::array();
  for (const auto& t : q.history) {
    j["trials"].push_back({{"what", t.what}, {"outcome", t.outcome}, {"class", t.klass}, {"peak_bytes", t.peak_bytes},
                           {"seconds", t.seconds}, {"cached", t.cached}});
  }
  j["seconds"] = q.seconds;
  j["executor"] = q.executor;
  j["failure_not_memory"] = v.other_failure.empty() ? ojson(nullptr) : ojson(v.other_failure);
  j["memory_asked"] = q.memory_asked();
  j["failed_halves"] = v.failed_halves();
  if (q.numerics) {
    const auto& n = *q.numerics;
    const auto& c = n.comparison;
    ojson num = {{"reference", n.reference_file},
                 {"same", v.numerics_same.value_or(false)},
                 {"verdict", numerics_verdict(n)},
                 {"steps", c.steps},
                 {"reference_runs", c.reference_runs},
                 {"here_runs", c.here_runs},
                 {"replays", c.replays},
                 {"steps_from_same_state", c.steps_from_same_state},
                 {"modules_compared", c.modules_compared},
                 {"largest_noise", c.largest_noise},
                 {"closest", c.closest},
                 {"closest_at", c.closest_at},
                 {"failed_here", n.failed_here.empty() ? ojson(nullptr) : ojson(n.failed_here)},
                 {"notes", c.notes},
                 {"machines", {{"reference", ojson::parse(n.reference.side.machine.dump())},
                               {"here", ojson::parse(n.here.machine.dump())}}}};
    if (c.departure) {
      const auto& d = *c.departure;
      num["departure"] = {{"step", d.step}, {"quantity", d.quantity}, {"module", d.module}, {"reference", d.reference},
                          {"here", d.here}, {"by", d.by}, {"noise", d.noise}, {"same_state", d.same_state}};
    } else {
      num["departure"] = nullptr;
    }
    j["numerics"] = std::move(num);
  }
  return j;
}

}  // namespace

void write_qualification(const fs::path& out, const Qualification& q, const QualificationVerdict& v) {
  if (q.memory_asked()) write_memory_plot(out / "memory_vs_batch.png", q, v);
  if (q.numerics) write_numerics_plot(out / "numerics_loss.png", *q.numerics);
  const std::string md = qualification_markdown(q, v);
  write_file_atomically((out / "qualification.md").string(), md);
  write_file_atomically((out / "qualification.html").string(),
                        report::markdown_page_html(qualification_title(q), md, out.string()));
  write_file_atomically((out / "qualification.json").string(),
                        qualification_json(q, v).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::string qualification_summary(const Qualification& q, const QualificationVerdict& v) {
  std::ostringstream s;
  if (q.numerics) {
    s << (v.qualifies() ? "QUALIFIES" : "DOES NOT QUALIFY (" + v.failed_halves() + ")") << "\n  numerics: "
      << numerics_verdict(*q.numerics) << "\n  memory: ";
    if (!q.memory_asked()) return s.str() + "not asked (no --profile or --budget)";
  }
  if (v.memory_fits()) {
    const auto& best = q.searches[*v.best];
    s << "QUALIFIES: batch " << best.confirm.batch << " x " << best.confirm.accumulation << " accumulation ("
      << best.precision << "), peak " << scenario::format_bytes(best.confirm.peak) << ", headroom "
      << scenario::format_bytes(qualification_headroom(q, best, best.confirm.peak));
  } else if (!v.other_failure.empty()) {
    s << "DOES NOT QUALIFY (not answered: training fails for another reason than memory, " << v.other_failure << ")";
  } else {
    s << "DOES NOT QUALIFY";
  }
  if (!q.estimate_note.empty()) s << " (host-memory estimate: no CUDA context, cuDNN workspace or allocator overhead)";
  return s.str();
}

}  // namespace dbh::harness::qualify
