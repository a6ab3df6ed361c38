// What a bisection writes: bisect.json, bisect.md, bisect.html and the summary
// on the terminal (bisect/parts.h).
#include "harness/bisect/parts.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/probe/cluster.h"
#include "harness/probe/probe.h"
#include "harness/common/files.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/report/markdown_html.h"
#include "harness/report/markdown_text.h"
#include "harness/report/report.h"

namespace dbh::harness::bisect {
namespace fs = std::filesystem;

namespace {

struct StepCost {
  int64_t run = 0;         // probes that ran (not cached)
  int64_t steps = 0;       // steps they executed
  int64_t from_start = 0;  // steps they would have executed from step 0
};

StepCost step_cost(const probe::Prober& prober) {
  StepCost c;
  for (const auto& p : prober.history()) {
    if (p.cached) continue;
    ++c.run;
    c.steps += steps_run(p);
    c.from_start += steps_run(p) + resumed_from(p).value_or(0);
  }
  return c;
}

ojson probes_json(const probe::Prober& prober) {
  ojson a = ojson::array();
  for (const auto& p : prober.history()) {
    const auto resumed = resumed_from(p);
    a.push_back({{"index", p.index},
                 {"what", p.what},
                 {"config", p.overrides},
                 {"outcome", to_string(p.analysis.outcome)},
                 {"class", p.analysis.failure.klass},
                 {"step", p.analysis.failure.step ? ojson(*p.analysis.failure.step) : ojson(nullptr)},
                 {"module", p.analysis.failure.module},
                 {"seconds", p.seconds},
                 {"cached", p.cached},
                 {"fresh", p.fresh},
                 {"parallel", p.parallel},
                 {"forked", p.analysis.forked},
                 {"cold_reason", p.analysis.cold_reason},
                 {"steps_run", steps_run(p)},
                 {"resumed_from", resumed ? ojson(*resumed) : ojson(nullptr)},
                 {"hash", p.hash},
                 {"key", p.key}});
  }
  return a;
}

}  // namespace

// Settles the verdict: the confidence of an answer with doubts (unconfirmed,
// contradicted, mixed) is capped, and one below kConfidentAt is a doubt.
void conclude(Outputs& o, double base_confidence) {
  if (!o.found) {
    o.confidence = 0;
    return;
  }
  if (!o.confirmed || !o.doubts.empty()) base_confidence = std::min(base_confidence, kUnconfirmedCap);
  o.confidence = base_confidence;
  if (o.confirmed && o.doubts.empty() && base_confidence < kConfidentAt) {
    o.doubts.push_back("confidence " + fixed3(base_confidence) + " is below " + fixed3(kConfidentAt) +
                       " (the failure is flaky: " + std::to_string(o.rep.failures) + " of " +
                       std::to_string(o.rep.runs) + " runs)");
  }
}

int finish(const Outputs& o, const probe::Prober& prober, const fs::path& out, double seconds, int64_t removed_bytes) {
  const bool confident = o.confident();
  const std::string verdict = confident ? "confident" : "unsure";
  ojson j;
  j["schema_version"] = 1;
  j["kind"] = to_string(o.kind);
  j["scenario"] = prober.scenario_path();
  j["overrides"] = prober.base_overrides();
  j["result"] = o.result;
  j["summary"] = o.summary;  // the answer in words (Markdown), as bisect.md opens
  j["found"] = o.found;
  j["confirmed"] = o.confirmed;
  j["verdict"] = verdict;
  j["doubts"] = o.doubts;
  j["details"] = o.details;
  j["confidence"] = o.confidence;
  j["reproduction"] = {{"runs", o.rep.runs}, {"failures", o.rep.failures}, {"rate", o.rep.rate},
                       {"flaky", o.rep.flaky}, {"repetitions_per_probe", o.rep.per_probe},
                       {"failed_differently", o.rep.different}, {"failure", o.rep.sig.text()}};
  j["probes"] = probes_json(prober);
  const auto [fresh, parallel, forked] = probe::count_probes(prober.history());
  j["probe_count"] = prober.history().size();
  j["fresh_probes"] = fresh;
  j["jobs"] = prober.jobs();
  j["parallel_probes"] = parallel;  // of the fresh ones: run ahead, beside an earlier probe
  j["forked_probes"] = forked;      // of the fresh ones: forked from a warm worker (Note [A warm worker])
  j["executor"] = probe::executor_description();  // Note [Probes on a cluster]
  // Note [Cheap probes]: replays resume from the reproduction's checkpoints.
  const StepCost cost = step_cost(prober);
  const bool replays = o.kind == BisectKind::kSteps || o.kind == BisectKind::kModules;
  j["steps_run_total"] = cost.steps;
  if (replays) j["steps_from_start"] = cost.from_start;
  j["seconds"] = seconds;
  j["checkpoints"] = {{"kept", prober.keep_checkpoints()}, {"removed_bytes", removed_bytes},
                      {"replay_from_start", o.replay_from_start}};
  j["repro"] = o.repro;
  write_file_atomically((out / "bisect.json").string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::ostringstream md;
  // The answer quotes what the worker reported: as safe Markdown.
  md << "## Bisection: " << to_string(o.kind) << "\n\n" << report::markdown_text(o.summary) << "\n\n";
  if (confident) {
    md << "**Verdict: confident.** Fresh re-checks confirmed the answer and no probe contradicts it.\n\n";
  } else if (o.found) {
    md << "**Verdict: unsure** (confidence " << fixed3(o.confidence) << "). Do not act on this answer alone:\n\n";
    for (const auto& d : o.doubts) md << "- " << report::markdown_text(d) << "\n";
    md << "\n";
  } else {
    // The verdict bisect.json gives, in the same words.
    md << "**Verdict: unsure: no answer.**" << (o.doubts.empty() ? "" : " Why:") << "\n\n";
    for (const auto& d : o.doubts) md << "- " << report::markdown_text(d) << "\n";
    if (!o.doubts.empty()) md << "\n";
  }
  for (const auto& d : o.details) md << "- " << report::markdown_text(d) << "\n";
  md << "\nReproduction: " << o.rep.failures << " of " << o.rep.runs << " runs failed"
     << (o.rep.sig.klass.empty() ? "" : " with " + markdown_inline(o.rep.sig.text()))
     << (o.rep.flaky ? " (flaky: " + std::to_string(o.rep.per_probe) + " repetitions per probe)" : "")
     << (o.rep.different > 0 ? "; " + std::to_string(o.rep.different) + " failed differently" : "")
     << ". Confidence " << fixed3(o.confidence) << ".\n\n";
  if (probe::Cluster::active() != nullptr) md << "Probes ran on " << probe::executor_description() << ".\n\n";
  md << "| probe | config | outcome | step | module | seconds |\n|---|---|---|---|---|---|\n";
  for (const auto& p : prober.history()) {
    std::string cfg;
    for (const auto& x : p.overrides) cfg += (cfg.empty() ? "" : " ") + x;
    if (cfg.size() > 80) cfg = cfg.substr(0, 77) + "...";
    md << "| " << p.index << " | " << markdown_code(cfg.empty() ? "(scenario)" : cfg) << " | "
       << to_string(p.analysis.outcome)
       << (p.analysis.failure.klass.empty() ? "" : " " + markdown_inline(p.analysis.failure.klass)) << " | "
       << (p.analysis.failure.step ? std::to_string(*p.analysis.failure.step) : "-") << " | "
       << (p.analysis.failure.module.empty() ? "-" : markdown_inline(p.analysis.failure.module)) << " | " << std::fixed
       << std::setprecision(1) << p.seconds << (p.cached ? " (cached)" : p.parallel ? " (ran ahead)" : p.fresh ? " (fresh)" : "")
       << (p.analysis.forked && !p.cached ? " (forked)" : "") << " |\n";
  }
  if (replays) {
    md << "\nSteps: replayed " << cost.steps << " steps in " << cost.run << " probes (from step 0 it would have been "
       << cost.from_start << ").\n";
  } else {
    md << "\nSteps: ran " << cost.steps << " steps in " << cost.run << " probes.\n";
  }
  md << "\nCheckpoints: "
     << (o.replay_from_start ? std::string("none written (--replay-from-start)")
         : prober.keep_checkpoints() ? "kept (--keep-checkpoints)"
                                     : "removed after the search (" + scenario::format_bytes(removed_bytes) + ")")
     << ". Probe folders keep their events and logs.\n";
  md << "\nReproduce the minimal failure:\n\n```sh\n" << o.repro << "\n```\n";
  write_file_atomically((out / "bisect.md").string(), md.str());
  write_file_atomically((out / "bisect.html").string(), report::markdown_page_html("Bisection: " + to_string(o.kind), md.str()));
  std::cout << (confident ? "result: " : o.found ? "unsure: " : "no result: ") << terminal_text(one_line(o.summary)) << "\n";
  if (!confident) {
    for (const auto& d : o.doubts) std::cout << "  - " << terminal_text(d) << "\n";
  }
  std::cout << "probes: " << prober.history().size() << " (" << fresh << " run, "
            << prober.history().size() - static_cast<size_t>(fresh) << " cached"
            << (parallel > 0 ? ", " + std::to_string(parallel) + " of them ahead in parallel" : "")
            << (forked > 0 ? ", " + std::to_string(forked) + " forked from a warm worker" : "")
            << (probe::Cluster::active() != nullptr ? ", on " + probe::executor_description() : "") << ") in " << std::fixed
            << std::setprecision(1) << seconds << " s; confidence " << std::setprecision(3) << o.confidence
            << " (" << verdict << ")"
            << "\nreport: " << (out / "bisect.md").string() << "\nrepro:  " << o.repro << std::endl;
  return confident ? 0 : 1;
}

}  // namespace dbh::harness::bisect
