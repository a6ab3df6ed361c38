#include "harness/common/home.h"
#include "harness/bisect/bisect_command.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "harness/bisect/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/common/value.h"
#include "harness/report/markdown_html.h"
#include "harness/report/report.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"
#include "model/data/scan.h"

namespace dbh::harness {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// An answer is "confident" only when it was confirmed by fresh probes, no
// evidence contradicts it and its confidence is at least this.
constexpr double kConfidentAt = 0.95;
// The most an answer gets that fresh re-checks did not confirm or that mixed
// evidence contradicts: no better than a coin toss.
constexpr double kUnconfirmedCap = 0.5;

std::string quote(const std::string& s) { return shell_quote(s); }

std::string command_line(const std::string& scenario, const std::vector<std::string>& overrides) {
  // A later override of the same key wins; print each key once, last value.
  std::vector<std::string> kept;
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string key = override_key(overrides[i]);
    bool later = false;
    for (size_t j = i + 1; j < overrides.size(); ++j) later = later || override_key(overrides[j]) == key;
    if (!later) kept.push_back(overrides[i]);
  }
  std::string cmd = quote(self_command()) + " run " + quote(scenario);
  for (const auto& o : kept) cmd += " " + quote(o);
  return cmd;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string list_yaml(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string fixed3(double v) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << v;
  return s.str();
}

// ---------------------------------------------------------------------------
// The failure being bisected, and whether a probe shows that same failure.

// File names (no folders) that `message` names: tokens ending in a known
// extension, e.g. ".../images/img_003.png: cannot decode" → img_003.png.
std::vector<std::string> files_named(const std::string& message) {
  static const std::set<std::string> kExt = {"png", "jpg", "jpeg", "bmp", "tif", "tiff", "webp", "gif",
                                             "json", "txt",  "pt",   "pth", "yaml", "yml"};
  std::set<std::string> out;
  size_t i = 0;
  auto in_token = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/' || c == '+' ||
           c == '@';
  };
  while (i < message.size()) {
    if (!in_token(message[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < message.size() && in_token(message[j])) ++j;
    std::string token = message.substr(i, j - i);
    while (!token.empty() && (token.back() == '.' || token.back() == '/')) token.pop_back();
    const auto slash = token.rfind('/');
    const std::string base = slash == std::string::npos ? token : token.substr(slash + 1);
    const auto dot = base.rfind('.');
    if (dot != std::string::npos && dot > 0) {
      std::string ext = base.substr(dot + 1);
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      if (kExt.count(ext)) out.insert(base);
    }
    i = j;
  }
  return {out.begin(), out.end()};
}

// Module names (of the scenario's model) that `message` names.
std::vector<std::string> modules_named(const std::string& message, const std::string& decoder) {
  std::vector<std::string> out;
  for (const auto& m : known_module_names(decoder)) {
    for (size_t at = message.find(m); at != std::string::npos; at = message.find(m, at + 1)) {
      const size_t end = at + m.size();
      const bool left_ok = at == 0 || !(std::isalnum(static_cast<unsigned char>(message[at - 1])) ||
                                        message[at - 1] == '_' || message[at - 1] == '.');
      const bool right_ok = end >= message.size() || !std::isalnum(static_cast<unsigned char>(message[end]));
      if (left_ok && right_ok) {
        out.push_back(m);
        break;
      }
    }
  }
  return out;
}

struct Signature {
  std::string klass;
  std::optional<int64_t> step;
  bool check_step = false;  // steps/modules: a replay must fail at the same step
  bool before_training = false;
  std::vector<std::string> files;
  std::vector<std::string> modules;

  std::string text() const {
    std::string t = "`" + (klass.empty() ? std::string("failure") : klass) + "`";
    if (before_training) t += " before training";
    if (check_step && step) t += " at step " + std::to_string(*step);
    if (!files.empty()) t += " naming " + join(files, ", ");
    if (!modules.empty()) t += " in " + join(modules, ", ");
    return t;
  }
};

Signature signature_of(const ProbeResult& p, const std::string& decoder, bool check_step) {
  Signature s;
  const auto& f = p.analysis.failure;
  s.klass = f.klass;
  s.step = f.step;
  s.check_step = check_step;
  s.before_training = failed_before_training(p.analysis);
  s.files = files_named(f.message);
  s.modules = modules_named(f.message, decoder);
  return s;
}

// Note [One divergence]: where a diverging run's first non-finite value
// shows (an activation in the forward pass, a gradient in the backward pass,
// the loss, and in which module) moves with the decoder, the precision or the
// step the run reaches. Across configurations (config and range bisection,
// which do not pin the step) that is one failure; a replay of one
// configuration (steps, modules) must still show the same class and site.
bool is_divergence(const std::string& klass) {
  return klass == "nonfinite_activation" || klass == "nonfinite_gradient" || klass == "nonfinite_loss";
}

// Why the failing probe `p` is not the failure `sig` ("" when it is).
std::string difference(const ProbeResult& p, const Signature& sig) {
  const auto& f = p.analysis.failure;
  const bool one_divergence = !sig.check_step && is_divergence(sig.klass) && is_divergence(f.klass);
  if (f.klass != sig.klass && !one_divergence) return "class `" + f.klass + "` instead of `" + sig.klass + "`";
  if (failed_before_training(p.analysis) != sig.before_training) {
    return sig.before_training ? "failed during training, not before" : "failed before training";
  }
  if (sig.check_step && sig.step && f.step != sig.step) {
    return "failed at step " + (f.step ? std::to_string(*f.step) : std::string("-")) + " instead of " +
           std::to_string(*sig.step);
  }
  for (const auto& file : sig.files) {
    if (f.message.find(file) == std::string::npos) return "its message does not name " + file;
  }
  for (const auto& m : sig.modules) {
    if (one_divergence) break;
    if (f.message.find(m) == std::string::npos && f.module != m) return "its message does not name " + m;
  }
  return "";
}

Verdict judge(const ProbeResult& p, const Signature& sig) {
  if (p.verdict != Verdict::kFail) return p.verdict;
  return difference(p, sig).empty() ? Verdict::kFail : Verdict::kDifferent;
}

// ---------------------------------------------------------------------------
// Reproduction: how reliably the failure reproduces, and how many repetitions
// each probe needs so that a passing verdict is wrong with probability <= alpha.

struct Reproduction {
  ProbeResult baseline;  // the first failing run (the failure being bisected)
  ProbeResult source;    // the first run (steps: its checkpoints are replayed)
  Signature sig;
  int64_t runs = 0;
  int64_t failures = 0;   // runs that failed the same way as the baseline
  int64_t different = 0;  // runs that failed another way
  double rate = 0;
  int64_t per_probe = 1;
  bool flaky = false;
  std::vector<std::string> notes;
};

struct ReproducePlan {
  std::vector<std::string> first;  // overrides of the first run
  std::vector<std::string> rest;   // overrides of the others
  bool keep_checkpoints = false;   // the first run's checkpoints are replayed
  bool first_may_be_cached = false;
  bool check_step = false;
};

Reproduction reproduce(Prober& prober, const ReproducePlan& plan, const BisectOptions& o, const std::string& decoder) {
  Reproduction r;
  std::vector<ProbeResult> runs;
  runs.push_back(plan.keep_checkpoints      ? prober.probe_keeping_checkpoints(plan.first, "reproduce the failure")
                 : plan.first_may_be_cached ? prober.probe(plan.first, "reproduce the failure")
                                            : prober.probe_fresh(plan.first, "reproduce the failure"));
  for (int64_t i = 1; i < o.reproductions; ++i) {
    runs.push_back(prober.probe_fresh(plan.rest, "reproduction rate, run " + std::to_string(i + 1)));
  }
  r.source = runs.front();
  r.baseline = runs.front();
  // The failure being bisected: the one most reproduction runs show (the
  // first of them on a tie), not merely the first, which may be a timeout of
  // a busy machine.
  int64_t best = 0;
  for (const auto& candidate : runs) {
    if (candidate.verdict != Verdict::kFail) continue;
    const Signature sig = signature_of(candidate, decoder, plan.check_step);
    int64_t same = 0;
    for (const auto& p : runs) same += judge(p, sig) == Verdict::kFail ? 1 : 0;
    if (same > best) {
      best = same;
      r.baseline = candidate;
    }
  }
  r.sig = signature_of(r.baseline, decoder, plan.check_step);
  r.runs = static_cast<int64_t>(runs.size());
  for (const auto& p : runs) {
    const Verdict v = judge(p, r.sig);
    if (v == Verdict::kFail) ++r.failures;
    if (v == Verdict::kDifferent) {
      ++r.different;
      r.notes.push_back("reproduction probe " + std::to_string(p.index) + " failed differently (" +
                        difference(p, r.sig) + ")");
    }
  }
  r.rate = r.runs > 0 ? static_cast<double>(r.failures) / static_cast<double>(r.runs) : 0.0;
  r.flaky = r.failures > 0 && r.failures < r.runs;
  r.per_probe = r.flaky ? std::min<int64_t>(12, repetitions_for(r.rate, o.alpha)) : 1;
  return r;
}

// Probability that no passing verdict hid a failure.
double confidence(const Reproduction& r, int64_t pass_verdicts) {
  if (!r.flaky) return 1.0;
  const double miss = std::pow(1.0 - r.rate, static_cast<double>(r.per_probe));
  return std::pow(1.0 - miss, static_cast<double>(pass_verdicts));
}

// The probes of one search, judged against the failure being bisected, with
// what they showed per configuration (for the mixed-evidence check).
class Search {
 public:
  Search(Prober& prober, const Reproduction& rep, Signature sig) : prober_(prober), rep_(rep), sig_(std::move(sig)) {}

  /// The verdict for `extra`: one probe (cached unless `fresh`) for a
  /// deterministic failure; for a flaky one up to per_probe fresh
  /// repetitions, failing at the first that fails the same way.
  Verdict verdict(const std::vector<std::string>& extra, const std::string& what, bool fresh,
                  ProbeResult* last = nullptr) {
    const int64_t k = rep_.per_probe;
    bool unknown = false, different = false;
    for (int64_t i = 0; i < k; ++i) {
      const std::string label = what + (k > 1 ? " [" + std::to_string(i + 1) + "/" + std::to_string(k) + "]" : "");
      const ProbeResult p = (fresh || k > 1) ? prober_.probe_fresh(extra, label) : prober_.probe(extra, label);
      if (last) *last = p;
      const Verdict v = judge(p, sig_);
      auto& seen = seen_[join(extra, " ")];
      seen.what = what;
      if (v == Verdict::kPass) ++seen.passes;
      if (v == Verdict::kFail) ++seen.fails;
      if (v == Verdict::kFail) return v;
      if (v == Verdict::kDifferent) {
        different = true;
        if (notes_.size() < 8) {
          notes_.push_back("probe " + std::to_string(p.index) + " (" + what +
                           ") failed differently: " + difference(p, sig_));
        }
      }
      unknown = unknown || v == Verdict::kUnknown;
    }
    if (different) return Verdict::kDifferent;
    if (unknown) return Verdict::kUnknown;
    ++passes_;
    return Verdict::kPass;
  }

  /// Configurations whose single runs both passed and failed the same way
  /// although the failure reproduced every time: evidence of flakiness the
  /// reproduction runs did not show.
  std::vector<std::string> contradictions() const {
    std::vector<std::string> out;
    for (const auto& [config, seen] : seen_) {
      if (seen.passes > 0 && seen.fails > 0 && !rep_.flaky) {
        out.push_back("`" + seen.what + "` both passed (" + std::to_string(seen.passes) + "x) and failed (" +
                      std::to_string(seen.fails) + "x)");
      }
    }
    return out;
  }
  int64_t passes() const { return passes_; }
  const std::vector<std::string>& notes() const { return notes_; }
  const Signature& sig() const { return sig_; }

 private:
  struct Seen {
    std::string what;
    int64_t passes = 0, fails = 0;
  };
  Prober& prober_;
  const Reproduction& rep_;
  Signature sig_;
  std::map<std::string, Seen> seen_;
  int64_t passes_ = 0;
  std::vector<std::string> notes_;
};

// The step of a checkpoint the worker wrote ("checkpoint-r0-s16.pt" → 16);
// none for another file.
std::optional<int64_t> checkpoint_step(const fs::path& file) {
  const std::string name = file.filename().string();
  constexpr std::string_view kPrefix = "checkpoint-r0-s";
  if (name.rfind(kPrefix, 0) != 0 || file.extension() != ".pt") return std::nullopt;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - 3);
  int64_t step = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return step;
}

// The checkpoint step `p`'s trial resumed from; none when it started at step
// 0 or was answered from a cache (it ran nothing).
std::optional<int64_t> resumed_from(const ProbeResult& p) {
  if (p.cached) return std::nullopt;
  std::optional<int64_t> step;
  for (const auto& o : p.overrides) {
    const std::string key = override_text(DBH_SCENARIO_KEY(train.resume_from), "");
    if (o.rfind(key, 0) == 0) step = checkpoint_step(o.substr(key.size()));
  }
  return step;
}

// Optimizer steps `p`'s trial executed after it resumed (not the absolute step
// index): those that ended, and the one a failure cut short. 0 when cached.
int64_t steps_run(const ProbeResult& p) {
  if (p.cached) return 0;
  const auto& a = p.analysis;
  const bool cut_short = a.failure.step && (a.steps.empty() || *a.failure.step > a.steps.back().step);
  return a.steps_completed + (cut_short ? 1 : 0);
}

// What the probes that ran executed, and what they would have executed had
// each started at step 0: the same replay, deterministic, runs the steps
// before its checkpoint as well (a replay stopped early by the failure stops
// there from step 0 too, so this is not always its train.stop_after).
struct StepCost {
  int64_t run = 0;         // probes that ran (not cached)
  int64_t steps = 0;       // steps they executed
  int64_t from_start = 0;  // steps they would have executed from step 0
};

StepCost step_cost(const Prober& prober) {
  StepCost c;
  for (const auto& p : prober.history()) {
    if (p.cached) continue;
    ++c.run;
    c.steps += steps_run(p);
    c.from_start += steps_run(p) + resumed_from(p).value_or(0);
  }
  return c;
}

ojson probes_json(const Prober& prober) {
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
                 {"steps_run", steps_run(p)},
                 {"resumed_from", resumed ? ojson(*resumed) : ojson(nullptr)},
                 {"hash", p.hash},
                 {"key", p.key}});
  }
  return a;
}

struct Outputs {
  std::string kind;
  ojson result;
  bool found = false;      // an answer was produced
  bool confirmed = false;  // fresh probes confirmed it
  double confidence = 0;
  std::vector<std::string> doubts;  // why the answer is unsure
  Reproduction rep;
  std::string repro;
  std::string summary;                 // one paragraph for bisect.md
  std::vector<std::string> details;    // bullet lines
  int64_t answer_step = -1;            // steps: the answer, for modules
  bool replay_from_start = false;      // steps, modules: no checkpoints, every replay from step 0

  bool confident() const { return found && confirmed && doubts.empty() && confidence >= kConfidentAt; }
};

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

int finish(const Outputs& o, const Prober& prober, const fs::path& out, double seconds, int64_t removed_bytes) {
  const bool confident = o.confident();
  const std::string verdict = confident ? "confident" : "unsure";
  ojson j;
  j["schema_version"] = 1;
  j["kind"] = o.kind;
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
  int64_t fresh = 0;
  for (const auto& p : prober.history()) fresh += p.cached ? 0 : 1;
  j["probe_count"] = prober.history().size();
  j["fresh_probes"] = fresh;
  // Note [Cheap probes]: replays resume from the reproduction's checkpoints.
  const StepCost cost = step_cost(prober);
  const bool replays = o.kind == "steps" || o.kind == "modules";
  j["steps_run_total"] = cost.steps;
  if (replays) j["steps_from_start"] = cost.from_start;
  j["seconds"] = seconds;
  j["checkpoints"] = {{"kept", prober.keep_checkpoints()}, {"removed_bytes", removed_bytes},
                      {"replay_from_start", o.replay_from_start}};
  j["repro"] = o.repro;
  write_file_atomically((out / "bisect.json").string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::ostringstream md;
  md << "## Bisection: " << o.kind << "\n\n" << o.summary << "\n\n";
  if (confident) {
    md << "**Verdict: confident.** Fresh re-checks confirmed the answer and no probe contradicts it.\n\n";
  } else if (o.found) {
    md << "**Verdict: unsure** (confidence " << fixed3(o.confidence) << "). Do not act on this answer alone:\n\n";
    for (const auto& d : o.doubts) md << "- " << d << "\n";
    md << "\n";
  } else {
    // The verdict bisect.json gives, in the same words.
    md << "**Verdict: unsure: no answer.**" << (o.doubts.empty() ? "" : " Why:") << "\n\n";
    for (const auto& d : o.doubts) md << "- " << d << "\n";
    if (!o.doubts.empty()) md << "\n";
  }
  for (const auto& d : o.details) md << "- " << d << "\n";
  md << "\nReproduction: " << o.rep.failures << " of " << o.rep.runs << " runs failed"
     << (o.rep.sig.klass.empty() ? "" : " with " + o.rep.sig.text())
     << (o.rep.flaky ? " (flaky: " + std::to_string(o.rep.per_probe) + " repetitions per probe)" : "")
     << (o.rep.different > 0 ? "; " + std::to_string(o.rep.different) + " failed differently" : "")
     << ". Confidence " << fixed3(o.confidence) << ".\n\n";
  md << "| probe | config | outcome | step | module | seconds |\n|---|---|---|---|---|---|\n";
  for (const auto& p : prober.history()) {
    std::string cfg;
    for (const auto& x : p.overrides) cfg += (cfg.empty() ? "" : " ") + x;
    if (cfg.size() > 80) cfg = cfg.substr(0, 77) + "...";
    md << "| " << p.index << " | `" << (cfg.empty() ? "(scenario)" : cfg) << "` | " << to_string(p.analysis.outcome)
       << (p.analysis.failure.klass.empty() ? "" : " " + p.analysis.failure.klass) << " | "
       << (p.analysis.failure.step ? std::to_string(*p.analysis.failure.step) : "-") << " | "
       << (p.analysis.failure.module.empty() ? "-" : p.analysis.failure.module) << " | " << std::fixed
       << std::setprecision(1) << p.seconds << (p.cached ? " (cached)" : p.fresh ? " (fresh)" : "") << " |\n";
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
                                     : "removed after the search (" + format_bytes(removed_bytes) + ")")
     << ". Probe folders keep their events and logs.\n";
  md << "\nReproduce the minimal failure:\n\n```sh\n" << o.repro << "\n```\n";
  write_file_atomically((out / "bisect.md").string(), md.str());
  write_file_atomically((out / "bisect.html").string(), markdown_page_html("Bisection: " + o.kind, md.str()));
  std::cout << (confident ? "result: " : o.found ? "unsure: " : "no result: ") << terminal_text(o.summary) << "\n";
  if (!confident) {
    for (const auto& d : o.doubts) std::cout << "  - " << terminal_text(d) << "\n";
  }
  std::cout << "probes: " << prober.history().size() << " (" << fresh << " run, "
            << prober.history().size() - static_cast<size_t>(fresh) << " cached) in " << std::fixed
            << std::setprecision(1) << seconds << " s; confidence " << std::setprecision(3) << o.confidence
            << " (" << verdict << ")"
            << "\nreport: " << (out / "bisect.md").string() << "\nrepro:  " << o.repro << std::endl;
  return confident ? 0 : 1;
}

// ---------------------------------------------------------------------------
// steps and modules

// Nearest checkpoint written by `probe` whose step count is <= limit.
std::optional<std::pair<int64_t, std::string>> nearest_checkpoint(const ProbeResult& probe, int64_t limit) {
  std::error_code ec;
  if (probe.dir.empty() || !fs::exists(probe.dir, ec)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& e : fs::directory_iterator(probe.dir, ec)) {
    const auto step = checkpoint_step(e.path());
    if (step && *step <= limit && (!best || *step > best->first)) best = std::make_pair(*step, e.path().string());
  }
  return best;
}

// Note [Cheap probes]
// A replay of the first m steps need not train from step 0: the first
// reproduction run writes checkpoints (every max(2, ⌈n/8⌉) steps) and every
// replay resumes from the nearest one at or before step m-1, so a probe runs
// at most that many steps instead of up to n. bisect.json measures it: each
// probe's steps_run (steps executed after resuming) and resumed_from, and in
// total steps_run_total against steps_from_start, what the same probes would
// have executed from step 0. --replay-from-start turns it off (no checkpoints
// written, every replay from step 0): for disks too small for checkpoints, or
// to rule out checkpoint/resume as the cause. tests/integration/bisect_test.cc
// runs both ways; tests/bench/bisect_bench.cc (BM_BisectStepsReplay) times them.

// A replay of the first `stop_after` steps, resuming from the nearest of the
// reproduction's checkpoints when `resume`.
std::vector<std::string> replay_overrides(const ProbeResult& source, int64_t stop_after, bool resume = true) {
  std::vector<std::string> o = {override_text(DBH_SCENARIO_KEY(train.stop_after), std::to_string(stop_after)),
                                override_text(DBH_SCENARIO_KEY(train.checkpoint_every), "0")};
  if (resume) {
    if (const auto ck = nearest_checkpoint(source, stop_after - 1)) {
      o.push_back(override_text(DBH_SCENARIO_KEY(train.resume_from), ck->second));
    }
  }
  return o;
}

Outputs bisect_steps(Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = "steps";
  const Scenario s = prober.load({});
  if (s.repeat.in_process != 1) {
    throw ScenarioError("bisect steps: expected " + std::string(DBH_SCENARIO_KEY(repeat.in_process)) + " 1, got " +
                        std::to_string(s.repeat.in_process));
  }
  const int64_t n = s.train.last_step();
  // At most 8 checkpoints (one is about as large as the model and its
  // optimizer state), at least 2 steps apart: replaying a step is cheaper than
  // writing and loading one.
  const int64_t every = std::max<int64_t>(2, (n + 7) / 8);
  const bool resume = !o.replay_from_start;  // Note [Cheap probes]
  out.replay_from_start = o.replay_from_start;
  ReproducePlan plan;
  plan.first = {override_text(DBH_SCENARIO_KEY(train.checkpoint_every), std::to_string(resume ? every : 0))};
  plan.rest = {override_text(DBH_SCENARIO_KEY(train.checkpoint_every), "0")};
  plan.keep_checkpoints = resume;
  plan.check_step = true;
  out.rep = reproduce(prober, plan, o, s.model.decoder);
  out.doubts = out.rep.notes;
  const std::string base_repro = command_line(prober.scenario_path(), prober.base_overrides());
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce (" + std::to_string(out.rep.runs) + " runs, none failed" +
                  (out.rep.different > 0 ? " the same way" : "") + ")";
    out.repro = base_repro;
    return out;
  }
  const auto& fail = out.rep.baseline.analysis.failure;
  if (out.rep.sig.before_training) {
    out.summary = "the failure happens before training (no step completed: `" + fail.klass + "`, \"" +
                  one_line(fail.message) + "\"), so there is no failing step to bisect";
    out.doubts.push_back("a failure before the first step (data validation, preflight, model or checkpoint "
                         "loading) cannot be bisected by steps; try `dbh bisect data` or `dbh diagnose`");
    out.result = {{"step", nullptr}, {"before_training", true}, {"class", fail.klass}, {"message", fail.message}};
    out.repro = base_repro;
    return out;
  }
  const auto hint = fail.step;
  Search search(prober, out.rep, out.rep.sig);
  std::map<int64_t, Verdict> seen;  // prefix length → verdict
  auto fails = [&](int64_t m) {
    const Verdict v = search.verdict(replay_overrides(out.rep.source, m, resume),
                                     "first " + std::to_string(m) + " step(s)", /*fresh=*/false);
    seen[m] = v;
    return v;
  };
  const auto r = find_first_failing(1, n, fails);
  if (!r.first_fail) {
    out.summary = "no failing prefix found: " + r.note;
    out.repro = base_repro;
    return out;
  }
  const int64_t step = *r.first_fail - 1;
  out.found = true;
  out.answer_step = step;
  if (!r.note.empty()) out.doubts.push_back(r.note);
  // Confirm both ends with fresh probes: the steps before the answer pass,
  // the answer fails the same way.
  bool before_passes = true;
  if (step >= 1) {
    before_passes = search.verdict(replay_overrides(out.rep.source, step, resume),
                                   "re-check: first " + std::to_string(step) + " step(s)", /*fresh=*/true) ==
                    Verdict::kPass;
    if (!before_passes) {
      out.doubts.push_back("re-check: the first " + std::to_string(step) + " step(s) did not pass when run again");
    }
  }
  const bool answer_fails = search.verdict(replay_overrides(out.rep.source, step + 1, resume),
                                           "re-check: first " + std::to_string(step + 1) + " step(s)",
                                           /*fresh=*/true) == Verdict::kFail;
  if (!answer_fails) {
    out.doubts.push_back("re-check: the first " + std::to_string(step + 1) +
                         " step(s) did not fail the same way when run again");
  }
  out.confirmed = before_passes && answer_fails;
  const bool agrees = !hint || *hint == step;
  if (!agrees) {
    out.doubts.push_back("the reproduction failed at step " + std::to_string(*hint) + ", the replays at step " +
                         std::to_string(step));
  }
  for (const auto& [m, v] : seen) {
    if (v != Verdict::kFail) continue;
    for (const auto& [m2, v2] : seen) {
      if (m2 > m && v2 == Verdict::kPass) {
        out.doubts.push_back("the first " + std::to_string(m) + " step(s) failed but the first " +
                             std::to_string(m2) + " passed");
      }
    }
  }
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, search.passes()));
  out.result = {{"step", step},
                {"monitor_step", hint ? ojson(*hint) : ojson(nullptr)},
                {"agrees_with_monitors", agrees},
                {"class", fail.klass},
                {"flaky_boundary", !out.confirmed}};
  out.summary = (out.confirmed ? "the first failing step is **" : "the first failing step appears to be **") +
                std::to_string(step) + "** (class `" + fail.klass + "`)";
  if (hint) {
    out.details.push_back(std::string("the monitors of the full run flagged step ") + std::to_string(*hint) +
                          (*hint == step ? " (agrees)" : " (differs)"));
  }
  out.details.push_back(resume ? "replays resume from checkpoints written every " + std::to_string(every) +
                                     " step(s) by the first reproduction run; no other probe writes checkpoints"
                              : std::string("replays start at step 0 (--replay-from-start); no probe writes "
                                            "checkpoints"));
  out.repro = command_line(prober.scenario_path(),
                           concat(prober.base_overrides(),
                                  replay_overrides(out.rep.source, step + 1, resume && prober.keep_checkpoints())));
  return out;
}

Outputs bisect_modules(Prober& prober, const BisectOptions& o) {
  Outputs steps = bisect_steps(prober, o);
  Outputs out;
  out.kind = "modules";
  out.rep = steps.rep;
  out.doubts = steps.doubts;
  out.details = steps.details;
  out.replay_from_start = steps.replay_from_start;
  if (!steps.found) {
    out.summary = "no failing step to replay: " + steps.summary;
    out.repro = steps.repro;
    return out;
  }
  const int64_t step = steps.answer_step;
  auto extra = replay_overrides(steps.rep.source, step + 1, !o.replay_from_start);
  extra.push_back(override_text(DBH_SCENARIO_KEY(monitors.mode), "localise"));
  // Localise mode names sites more precisely: the same class at the same
  // step is the same failure.
  Signature sig = steps.rep.sig;
  sig.modules.clear();
  Search search(prober, steps.rep, sig);
  ProbeResult replay;
  const Verdict v = search.verdict(extra, "localise replay of step " + std::to_string(step), /*fresh=*/false, &replay);
  if (v != Verdict::kFail) {
    out.doubts.push_back("the localise replay of step " + std::to_string(step) + " did not fail the same way (" +
                         to_string(v) + (v == Verdict::kDifferent ? ": " + difference(replay, sig) : "") + ")");
  }
  out.confirmed = steps.confirmed && v == Verdict::kFail;
  std::vector<std::string> repro_extra =
      replay_overrides(steps.rep.source, step + 1, !o.replay_from_start && prober.keep_checkpoints());
  repro_extra.push_back(override_text(DBH_SCENARIO_KEY(monitors.mode), "localise"));
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), repro_extra));
  const auto& h = replay.analysis.primary_health;
  if (h.is_null() || h.empty()) {
    out.summary = "the replay of step " + std::to_string(step) + " failed without a non-finite tensor (" +
                  to_string(replay.analysis.outcome) + ": " + replay.analysis.failure.message + ")";
    out.result = {{"step", step}, {"module", replay.analysis.failure.module}};
    out.found = !replay.analysis.failure.module.empty();
    conclude(out, steps.confidence);
    return out;
  }
  const std::string kind = h.value("kind", "");
  const std::string direction = kind == "gradient" ? "backward" : kind == "activation" ? "forward" : "inputs";
  out.found = true;
  conclude(out, steps.confidence);
  out.result = {{"step", step},
                {"direction", direction},
                {"kind", kind},
                {"module", h.value("module", "")},
                {"tensor", h.value("site", "")},
                {"stats", h.contains("stats") ? ojson::parse(h["stats"].dump()) : ojson(nullptr)},
                {"input_module", h.value("input_module", "")},
                {"input_stats", h.contains("input_stats") ? ojson::parse(h["input_stats"].dump()) : ojson(nullptr)}};
  out.summary = "at step " + std::to_string(step) + " the first non-finite " + kind + " in " + direction +
                " order is `" + h.value("site", "") + "`" +
                (h.value("module", "").empty() ? "" : " in module `" + h.value("module", "") + "`");
  if (h.contains("stats")) out.details.push_back("its statistics: " + h["stats"].dump());
  if (h.contains("input_module")) {
    out.details.push_back("the module that ran before it, `" + h.value("input_module", "") +
                          "`, produced finite output: " + h["input_stats"].dump());
  }
  return out;
}

// ---------------------------------------------------------------------------
// data

// Writes a dataset in `dir` holding only the images `keep` of the dataset at
// `root` (images linked, annotations rewritten or linked), in the dataset's
// order. Returns `dir`.
std::string write_dataset_copy(const model::ScanResult& scan, const std::set<std::string>& keep, const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir / "images", ec);
  if (ec) throw ReportError(dir.string() + ": expected a folder for a dataset copy, got: " + ec.message());
  const fs::path root = fs::absolute(scan.root);
  auto link = [&](const fs::path& from, const fs::path& to) {
    std::error_code e;
    fs::create_symlink(from, to, e);
    if (e) fs::copy_file(from, to, fs::copy_options::overwrite_existing, e);
    if (e) throw ReportError(to.string() + ": expected a link to " + from.string() + ", got: " + e.message());
  };
  for (const auto& file : keep) {
    const fs::path src = root / "images" / file;
    if (fs::exists(src, ec)) link(src, dir / "images" / file);
  }
  if (scan.format == "UFO JSON") {
    std::ifstream in(root / "annotations.json");
    const auto j = ojson::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("images") || !j["images"].is_object()) {
      throw ReportError((root / "annotations.json").string() +
                        ": expected a UFO JSON object with \"images\" to copy, got something else");
    }
    ojson copy = j;
    copy["images"] = ojson::object();
    for (auto it = j["images"].begin(); it != j["images"].end(); ++it) {
      if (keep.count(it.key())) copy["images"][it.key()] = it.value();
    }
    write_file_atomically((dir / "annotations.json").string(),
                          copy.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    fs::create_directories(dir / "icdar", ec);
    std::set<std::string> stems;
    for (const auto& f : keep) stems.insert(fs::path(f).stem().string());
    for (const auto& e : fs::directory_iterator(root / "icdar", ec)) {
      std::string stem = e.path().stem().string();
      if (stem.rfind("gt_", 0) == 0) stem = stem.substr(3);
      if (e.path().extension() == ".txt" && stems.count(stem)) link(e.path(), dir / "icdar" / e.path().filename());
    }
  }
  return dir.string();
}

// Removes a folder when it goes out of scope.
struct RemoveOnExit {
  fs::path dir;
  ~RemoveOnExit() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// Note [Every bad sample]: at most this many independent failing subsets are
// searched for, and at most kUnreachedSearched samples the failing run never
// reached.
constexpr size_t kMaxDefects = 4;
constexpr size_t kUnreachedSearched = 256;

// A data bisection's ground: the scenario, the dataset as scanned, the
// reproduced failure and the search over subsets of its samples.
struct DataSearch {
  Prober& prober;
  const BisectOptions& o;
  const Scenario& s;
  const model::ScanResult& scan;
  Search& search;
  std::string base_repro;  // the command that reproduces the failure on the whole dataset

  const std::vector<model::ImageAnnotation>& images() const { return scan.images; }
  ojson sample_json(int64_t i) const {
    const auto& im = scan.images[static_cast<size_t>(i)];
    std::vector<std::string> ids;
    for (const auto& w : im.words) ids.push_back(w.id);
    return ojson{{"index", i}, {"file", im.file}, {"annotation_ids", ids}};
  }
  // The dataset's samples at `indices`, as code spans: a file name is shown
  // verbatim, never read as markup (`**`, `<img …>`) in bisect.md or its page.
  std::string names(const std::vector<int64_t>& indices) const {
    std::string text;
    for (const int64_t i : indices) text += (text.empty() ? "" : ", ") + markdown_code(scan.images[static_cast<size_t>(i)].file);
    return text;
  }
};

// Before training: the dataset is validated (and, with preflight, decoded)
// as a whole before data.subset applies, so every subset fails and ddmin
// cannot isolate anything. A sample the message names is the answer, once
// the data without it passes and it alone fails.
void bisect_data_before_training(DataSearch& d, Outputs& out) {
  const Scenario& s = d.s;
  const auto& images = d.images();
  const auto& fail = out.rep.baseline.analysis;
  out.repro = d.base_repro;
  std::vector<int64_t> named;
  for (size_t i = 0; i < images.size(); ++i) {
    for (const auto& f : out.rep.sig.files) {
      if (images[i].file == f) named.push_back(static_cast<int64_t>(i));
    }
  }
  const std::string what = "`" + fail.failure.klass + "` before training: \"" + one_line(fail.failure.message) + "\"";
  if (named.empty()) {
    out.summary = "the failure happens before training (" + what + ") and names no sample of the dataset";
    out.doubts.push_back("the dataset is checked as a whole before " + std::string(DBH_SCENARIO_KEY(data.subset)) +
                         " applies, so no subset can isolate a failure before training; fix what the message "
                         "names, or run `dbh data check " +
                         s.data.path + "`");
    out.result = {{"samples", ojson::array()}, {"before_training", true}, {"class", fail.failure.klass},
                  {"message", fail.failure.message}};
    return;
  }
  out.found = true;
  std::set<std::string> named_files, others;
  for (const int64_t i : named) named_files.insert(images[static_cast<size_t>(i)].file);
  for (const auto& im : images) {
    if (!named_files.count(im.file)) others.insert(im.file);
  }
  RemoveOnExit copies{fs::path(d.prober.session_dir()) / "datasets"};
  std::vector<std::string> extra_base;
  if (!s.data.subset.empty()) extra_base.push_back(override_text(DBH_SCENARIO_KEY(data.subset), "[]"));
  bool without_passes = false;
  if (others.empty()) {
    out.doubts.push_back("the dataset holds only the named sample(s): there is no data without them to compare");
  }
  // Note [Every bad sample], before training: the data without the named
  // samples may fail naming another; that one joins the answer.
  Signature any_file = out.rep.sig;
  any_file.files.clear();
  Search further(d.prober, out.rep, any_file);
  for (size_t round = 0; !others.empty() && round < kMaxDefects; ++round) {
    const std::string without =
        write_dataset_copy(d.scan, others, copies.dir / ("without-named-" + std::to_string(round)));
    ProbeResult last;
    const Verdict v = further.verdict(concat(extra_base, {override_text(DBH_SCENARIO_KEY(data.path), without)}),
                                      "re-check: data without the named sample(s)", /*fresh=*/true, &last);
    without_passes = v == Verdict::kPass;
    if (v != Verdict::kFail) break;
    size_t added = 0;
    for (const auto& f : files_named(last.analysis.failure.message)) {
      if (!others.count(f)) continue;
      others.erase(f);
      named_files.insert(f);
      for (size_t i = 0; i < images.size(); ++i) {
        if (images[i].file == f) named.push_back(static_cast<int64_t>(i));
      }
      ++added;
    }
    if (added == 0) break;
    std::sort(named.begin(), named.end());
  }
  if (!others.empty() && !without_passes) {
    out.doubts.push_back("re-check: the data without the named sample(s) did not pass");
  }
  const std::string alone = write_dataset_copy(d.scan, named_files, copies.dir / "named-only");
  const bool alone_fails = d.search.verdict(concat(extra_base, {override_text(DBH_SCENARIO_KEY(data.path), alone)}),
                                            "re-check: the named sample(s) alone", /*fresh=*/true) == Verdict::kFail;
  if (!alone_fails) out.doubts.push_back("re-check: the named sample(s) alone did not fail the same way");
  out.confirmed = without_passes && alone_fails;
  for (const auto& c : d.search.contradictions()) out.doubts.push_back(c);
  for (const auto& c : further.contradictions()) out.doubts.push_back(c);
  for (const auto& note : d.search.notes()) out.details.push_back(note);
  for (const auto& note : further.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, d.search.passes() + further.passes()));
  ojson samples = ojson::array();
  for (const int64_t i : named) samples.push_back(d.sample_json(i));
  out.result = {{"samples", samples}, {"before_training", true}, {"method", "named by the failure"},
                {"class", fail.failure.klass}, {"consumed", 0}};
  out.summary = "the failure happens before training and names " + d.names(named) + " (index " + list_yaml(named) +
                ")" +
                (out.confirmed ? named.size() == 1 ? ": the data without it passes, it alone fails"
                                                   : ": the data without them passes, they alone fail"
                               : "");
  if (fail.failure.klass == "data_invalid") {
    out.summary += ". A data defect: `" + shell_command({self_command(), "data", "check", s.data.path}) +
                   "` lists every sample dbh cannot read, without training";
  }
  out.details.push_back("the dataset is validated as a whole before " + std::string(DBH_SCENARIO_KEY(data.subset)) +
                        " applies, so subsets cannot isolate this failure; the answer is the sample its message "
                        "names, checked on copies of the dataset with and without it");
}

// The overrides that train on `subset` alone: enough steps to consume every
// sample once, and at least up to the failing step so the scenario's fault
// schedule stays valid.
std::vector<std::string> subset_overrides(const Scenario& s, int64_t last_step, const std::vector<int64_t>& subset) {
  const int64_t steps =
      std::max<int64_t>({int64_t{1}, (static_cast<int64_t>(subset.size()) + s.data.batch_size - 1) / s.data.batch_size,
                         std::min(last_step + 1, s.train.max_steps)});
  return std::vector<std::string>{override_text(DBH_SCENARIO_KEY(data.subset), list_yaml(subset)),
                                  override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(steps)),
                                  "controls=[]"};
}

std::string subset_label(const std::string& prefix, const std::vector<int64_t>& subset) {
  std::string what = prefix + "samples " + list_yaml(subset);
  return what.size() > 44 ? prefix + std::to_string(subset.size()) + " samples" : what;
}

// Note [Every bad sample]: what the search for further failing subsets found.
struct DefectSearch {
  std::vector<std::vector<int64_t>> defects;  // the failing subsets, the first one first
  bool rest_passes = false;                   // the data without them passes
  bool searched_unreached = false;            // the samples the run never reached were searched too
  std::string left_over;                      // why the search stopped with data still failing
};

// Note [Every bad sample]: a dataset with two broken files holds two
// independent answers, and a 1-minimal subset names only one. While the
// data without every subset found so far still fails with the same class
// (naming any file: the next defect names its own), ddmin runs again on
// what is left; first over the samples the failing run consumed, then,
// for a data defect, over the samples it never reached (at most
// kUnreachedSearched of them). Whatever is left unsearched is said, with
// `dbh data check`, which reads every sample without training.
DefectSearch search_further_defects(DataSearch& d, Outputs& out, Search& further, int64_t last_step,
                                    const std::vector<int64_t>& minimal, const std::vector<int64_t>& consumed,
                                    const std::vector<int64_t>& unreached, bool data_defect) {
  DefectSearch found;
  found.defects = {minimal};
  std::set<int64_t> found_set(minimal.begin(), minimal.end());
  auto without_found = [&](const std::vector<int64_t>& pool) {
    std::vector<int64_t> left;
    for (const int64_t i : pool) {
      if (!found_set.count(i)) left.push_back(i);
    }
    return left;
  };
  const auto overrides = [&](const std::vector<int64_t>& subset) { return subset_overrides(d.s, last_step, subset); };
  std::vector<int64_t> pool = consumed;
  for (;;) {
    const std::vector<int64_t> rest = without_found(pool);
    if (rest.empty()) {
      if (pool.size() == consumed.size()) {
        out.doubts.push_back("every consumed sample is in the answer: there is no data without it to compare");
      }
      found.rest_passes = pool.size() != consumed.size();
    } else {
      const std::string what = "re-check: the data without " + std::string(found.defects.size() == 1 ? "it" : "them") +
                               (pool.size() == consumed.size() ? "" : " (samples the run never reached)");
      const Verdict v = further.verdict(overrides(rest), what, /*fresh=*/true);
      found.rest_passes = v == Verdict::kPass;
      if (v == Verdict::kFail && found.defects.size() < kMaxDefects) {
        if (!d.o.quiet) {
          std::cout << "the data without " << found_set.size() << " sample(s) still fails: searching " << rest.size()
                    << " samples for another" << std::endl;
        }
        const auto again = ddmin(rest.size(), [&](const std::vector<size_t>& idx) {
          std::vector<int64_t> subset;
          for (size_t k : idx) subset.push_back(rest[k]);
          return further.verdict(overrides(subset), subset_label("", subset), /*fresh=*/false);
        });
        if (again.reproduced && !again.minimal.empty()) {
          std::vector<int64_t> next;
          for (size_t k : again.minimal) next.push_back(rest[k]);
          if (further.verdict(overrides(next), subset_label("re-check: ", next), /*fresh=*/true) != Verdict::kFail) {
            out.doubts.push_back("re-check: the subset " + list_yaml(next) + " did not fail again when run fresh");
          }
          found.defects.push_back(next);
          found_set.insert(next.begin(), next.end());
          continue;
        }
        found.left_over = "the data without the " + std::to_string(found_set.size()) +
                          " sample(s) found still fails, but no subset of it fails alone";
      } else if (v == Verdict::kFail) {
        found.left_over = "the data without the " + std::to_string(found_set.size()) + " sample(s) found still fails (" +
                          std::to_string(kMaxDefects) + " subsets found; the search stops there)";
      } else if (v != Verdict::kPass) {
        found.left_over = "the data without the " + std::to_string(found_set.size()) + " sample(s) found " +
                          (v == Verdict::kDifferent ? "failed differently" : "could not be judged");
      }
    }
    // The consumed samples are clean: for a data defect, the samples the
    // failing run never reached may hold more.
    if (found.rest_passes && data_defect && !found.searched_unreached && !unreached.empty() &&
        unreached.size() <= kUnreachedSearched && found.defects.size() < kMaxDefects) {
      found.searched_unreached = true;
      pool = unreached;
      continue;
    }
    break;
  }
  return found;
}

Outputs bisect_data(Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = "data";
  const Scenario s = prober.load({});
  if (s.data.source != "real") {
    throw ScenarioError("bisect data: expected " + std::string(DBH_SCENARIO_KEY(data.source)) + " real, got " +
                        s.data.source);
  }
  ReproducePlan plan;
  plan.first_may_be_cached = true;
  out.rep = reproduce(prober, plan, o, s.model.decoder);
  out.doubts = out.rep.notes;
  const std::string base_repro = command_line(prober.scenario_path(), prober.base_overrides());
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce";
    out.repro = base_repro;
    return out;
  }
  const auto policy = s.data.on_invalid == "skip" ? model::OnInvalid::kSkip
                      : s.data.on_invalid == "clip" ? model::OnInvalid::kClip
                                                    : model::OnInvalid::kError;
  const auto scan = model::scan_dataset(s.data.path, policy, {}, /*check_images=*/false);
  const auto& fail = out.rep.baseline.analysis;
  Search search(prober, out.rep, out.rep.sig);
  DataSearch d{prober, o, s, scan, search, base_repro};
  if (out.rep.sig.before_training) {
    bisect_data_before_training(d, out);
    return out;
  }

  const int64_t last_step = fail.failure.step ? *fail.failure.step : s.train.max_steps - 1;
  // The samples the failing run consumed, in order of first use.
  std::vector<int64_t> consumed;
  std::set<int64_t> seen;
  const int64_t n = static_cast<int64_t>(scan.images.size());
  for (int64_t micro = 0; micro < (last_step + 1) * s.train.accumulation; ++micro) {
    for (const int64_t i : model::batch_indices(n, s.data.batch_size, s.train.seed, micro)) {
      if (seen.insert(i).second) consumed.push_back(i);
    }
  }
  std::sort(consumed.begin(), consumed.end());
  const auto overrides = [&](const std::vector<int64_t>& subset) { return subset_overrides(s, last_step, subset); };
  const auto r = ddmin(consumed.size(), [&](const std::vector<size_t>& idx) {
    std::vector<int64_t> subset;
    for (size_t k : idx) subset.push_back(consumed[k]);
    return search.verdict(overrides(subset), subset_label("", subset), /*fresh=*/false);
  });
  std::vector<int64_t> minimal;
  for (size_t k : r.minimal) minimal.push_back(consumed[k]);
  out.found = r.reproduced;
  ojson samples = ojson::array();
  for (const int64_t i : minimal) samples.push_back(d.sample_json(i));
  out.result = {{"samples", samples}, {"consumed", consumed.size()}, {"class", fail.failure.klass},
                {"method", "ddmin"}};
  out.details.push_back("the failing run consumed " + std::to_string(consumed.size()) + " samples up to step " +
                        std::to_string(last_step));
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), overrides(minimal)));
  if (!r.reproduced) {
    out.summary = "training on the consumed samples alone does not fail the same way";
    return out;
  }
  // Confirm with fresh probes: the subset fails, the data without it passes.
  const bool minimal_fails =
      search.verdict(overrides(minimal), subset_label("re-check: ", minimal), /*fresh=*/true) == Verdict::kFail;
  if (!minimal_fails) out.doubts.push_back("re-check: the minimal subset did not fail the same way when run again");
  const bool data_defect = fail.failure.klass == "data_invalid";
  Signature any_file = out.rep.sig;
  any_file.files.clear();
  Search further(prober, out.rep, any_file);
  std::vector<int64_t> unreached;
  for (int64_t i = 0; i < n; ++i) {
    if (!seen.count(i)) unreached.push_back(i);
  }
  const DefectSearch found =
      search_further_defects(d, out, further, last_step, minimal, consumed, unreached, data_defect);
  if (!found.left_over.empty()) out.doubts.push_back(found.left_over);
  const size_t unsearched = found.searched_unreached ? 0 : unreached.size();
  out.confirmed = minimal_fails && found.rest_passes && found.left_over.empty();
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& c : further.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  for (const auto& note : further.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, search.passes() + further.passes()));
  std::vector<int64_t> all_found;
  ojson groups = ojson::array();
  std::string group_names;
  for (const auto& defect : found.defects) {
    ojson g = ojson::array();
    for (const int64_t i : defect) {
      if (std::find(all_found.begin(), all_found.end(), i) == all_found.end()) {
        all_found.push_back(i);
        if (all_found.size() > minimal.size()) samples.push_back(d.sample_json(i));
      }
      g.push_back(i);
    }
    groups.push_back(g);
    group_names += (group_names.empty() ? "" : "; ") + d.names(defect) + " (index " + list_yaml(defect) + ")";
  }
  out.result["samples"] = samples;
  out.result["defects"] = groups;
  out.result["unsearched"] = unsearched;
  const std::string check_cmd = shell_command({self_command(), "data", "check", s.data.path});
  if (found.defects.size() == 1) {
    out.summary = "a 1-minimal failing subset of the " + std::to_string(consumed.size()) +
                  " samples the run consumed: " + d.names(minimal) + " (index " + list_yaml(minimal) + ")" +
                  (out.confirmed ? "; the data without it passes" : "");
  } else {
    out.summary = std::to_string(found.defects.size()) + " independent failing subsets, each failing alone: " +
                  group_names + (out.confirmed ? "; the data without them passes" : "");
  }
  if (unsearched > 0) {
    out.details.push_back(std::to_string(unsearched) + " of the " + std::to_string(n) +
                          " samples come after the failing step and were not searched; `" + check_cmd +
                          "` reads every sample without training");
  }
  if (data_defect) {
    out.summary += ". A data defect: `" + check_cmd + "` lists every sample dbh cannot read, without training";
  }
  return out;
}

// ---------------------------------------------------------------------------
// config and range

// key → value text for every leaf that a config difference can override.
void flatten(const ojson& j, const std::string& prefix, std::map<std::string, std::string>* out) {
  static const std::set<std::string> kSkip = {"name", "description", "expect", "controls"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (prefix.empty() && kSkip.count(it.key())) continue;
    if (it->is_object()) {
      flatten(*it, key, out);
    } else if (it->is_string()) {
      (*out)[key] = it->get<std::string>();
    } else {
      (*out)[key] = it->dump();
    }
  }
}

// A reproduction made of single probes (config and range do not measure a
// reproduction rate): deterministic unless a fresh re-check says otherwise.
Reproduction single_run(const ProbeResult& failing, int64_t runs, int64_t failures, const std::string& decoder) {
  Reproduction r;
  r.baseline = failing;
  r.source = failing;
  r.sig = signature_of(failing, decoder, /*check_step=*/false);
  r.runs = runs;
  r.failures = failures;
  r.rate = runs > 0 ? static_cast<double>(failures) / static_cast<double>(runs) : 0.0;
  return r;
}

Outputs bisect_config(const BisectOptions& o, std::unique_ptr<Prober>& prober, const fs::path& out_dir) {
  Outputs out;
  out.kind = "config";
  auto is_file = [](const std::vector<std::string>& v) { return v.size() == 1 && fs::is_regular_file(v[0]); };
  auto split_words = [](const std::vector<std::string>& v) {
    std::vector<std::string> words;
    for (const auto& s : v) {
      std::istringstream in(s);
      std::string w;
      while (in >> w) words.push_back(w);
    }
    return words;
  };
  std::string base;
  std::vector<std::string> good_overrides;
  if (is_file(o.good)) {
    base = o.good[0];
  } else {
    if (o.scenario.empty()) throw ScenarioError("bisect config: --good is an override set, so a SCENARIO is needed");
    base = o.scenario;
    good_overrides = split_words(o.good);
  }
  const Scenario good = load_scenario(base, concat(o.overrides, good_overrides));
  const Scenario bad = is_file(o.bad) ? load_scenario(o.bad[0], o.overrides)
                                      : load_scenario(base, concat(concat(o.overrides, good_overrides), split_words(o.bad)));
  std::map<std::string, std::string> g, b;
  flatten(ojson::parse(resolved_json(good)), "", &g);
  flatten(ojson::parse(resolved_json(bad)), "", &b);
  std::vector<std::string> diffs;
  for (const auto& [k, v] : b) {
    const auto it = g.find(k);
    if (it == g.end() || it->second != v) diffs.push_back(k + "=" + v);
  }
  prober = std::make_unique<Prober>(base, concat(o.overrides, good_overrides), out_dir.string(),
                                    o.cache_dir, o.quiet);
  prober->set_keep_checkpoints(o.keep_checkpoints);
  prober->set_judge_metrics(true);
  const auto good_probe = prober->probe({}, "good configuration");
  const auto bad_probe = prober->probe(diffs, "bad configuration (all " + std::to_string(diffs.size()) + " differences)");
  out.rep = single_run(bad_probe, 1, bad_probe.verdict == Verdict::kFail ? 1 : 0, bad.model.decoder);
  if (good_probe.verdict != Verdict::kPass || bad_probe.verdict != Verdict::kFail || diffs.empty()) {
    out.summary = "expected the good configuration to pass and the bad one to fail, got " +
                  to_string(good_probe.analysis.outcome) + " and " + to_string(bad_probe.analysis.outcome) +
                  (diffs.empty() ? " (no differing keys)" : "");
    out.repro = command_line(base, concat(prober->base_overrides(), diffs));
    return out;
  }
  Search search(*prober, out.rep, out.rep.sig);
  auto what_of = [](const std::vector<std::string>& subset) {
    std::string what = join(subset, " ");
    return what.size() > 44 ? std::to_string(subset.size()) + " keys" : what;
  };
  std::vector<std::string> invalid_subsets;  // differences that are no scenario on their own
  const auto r = ddmin(diffs.size(), [&](const std::vector<size_t>& idx) {
    std::vector<std::string> subset;
    for (size_t k : idx) subset.push_back(diffs[k]);
    try {
      return search.verdict(subset, what_of(subset), /*fresh=*/false);
    } catch (const ScenarioError& e) {
      // Some keys only make sense together (data.source=real needs its
      // data.path): a subset without its partner is no configuration, so it
      // is undecidable, as git bisect's "skip", never the end of the search.
      if (invalid_subsets.size() < 8) invalid_subsets.push_back(what_of(subset) + ": " + one_line(e.what()));
      return Verdict::kUnknown;
    }
  });
  for (const auto& s : invalid_subsets) {
    out.details.push_back("not a valid configuration, so undecidable: " + s);
  }
  std::vector<std::string> minimal;
  for (size_t k : r.minimal) minimal.push_back(diffs[k]);
  out.found = r.reproduced;
  out.result = {{"difference", minimal}, {"differing_keys", diffs.size()}};
  out.repro = command_line(base, concat(prober->base_overrides(), minimal));
  out.details.push_back(std::to_string(diffs.size()) + " keys differ between the good and the bad configuration");
  if (!r.reproduced) {
    out.summary = "the bad configuration does not fail the same way";
    return out;
  }
  // Confirm with fresh probes: the minimal difference fails, the good
  // configuration passes.
  const bool minimal_fails = search.verdict(minimal, "re-check: " + what_of(minimal), /*fresh=*/true) == Verdict::kFail;
  if (!minimal_fails) out.doubts.push_back("re-check: the minimal difference did not fail the same way");
  const bool good_passes = search.verdict({}, "re-check: good configuration", /*fresh=*/true) == Verdict::kPass;
  if (!good_passes) out.doubts.push_back("re-check: the good configuration did not pass");
  out.confirmed = minimal_fails && good_passes;
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  conclude(out, 1.0);
  // An external worker received each difference as its own key: say which.
  const auto passed = bad.worker.external() ? passed_keys(bad) : std::vector<PassedKey>{};
  std::string text;
  nlohmann::ordered_json as_passed = nlohmann::ordered_json::array();
  for (const auto& m : minimal) {
    text += (text.empty() ? "" : " + ") + std::string("`") + m + "`";
    const std::string key = m.substr(0, m.find('='));
    for (const auto& k : passed) {
      if (k.dbh_key != key) continue;
      text += " (your `" + k.user_key + "=" + k.value + "`)";
      as_passed.push_back(k.user_key + "=" + k.value);
    }
  }
  if (!as_passed.empty()) out.result["as_passed"] = as_passed;
  out.summary = "a 1-minimal failure-inducing difference: " + text;
  return out;
}

Outputs bisect_range(Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = "range";
  auto as_int = [](const std::string& s, int64_t* v) {
    return !s.empty() && std::from_chars(s.data(), s.data() + s.size(), *v).ec == std::errc() &&
           std::from_chars(s.data(), s.data() + s.size(), *v).ptr == s.data() + s.size();
  };
  int64_t ilo = 0, ihi = 0;
  const bool integral = as_int(o.lo, &ilo) && as_int(o.hi, &ihi);
  double dlo = 0, dhi = 0;
  try {
    dlo = std::stod(o.lo);
    dhi = std::stod(o.hi);
  } catch (const std::exception&) {
    throw ScenarioError("bisect range: --lo/--hi: expected numbers, got \"" + o.lo + "\" and \"" + o.hi + "\"");
  }
  if (!std::isfinite(dlo) || !std::isfinite(dhi)) {
    throw ScenarioError("bisect range: --lo/--hi: expected finite numbers, got \"" + one_line(o.lo) + "\" and \"" +
                        one_line(o.hi) + "\"");
  }
  if (!(dlo < dhi)) throw ScenarioError("bisect range: expected --lo < --hi, got " + o.lo + " and " + o.hi);
  auto at = [&](const std::string& v) { return std::vector<std::string>{o.key + "=" + v}; };
  // Both ends must be values the key accepts, before any probe runs.
  for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"--lo", o.lo}, {"--hi", o.hi}}) {
    try {
      (void)prober.load(at(value));
    } catch (const ScenarioError& e) {
      throw ScenarioError(std::string("bisect range: ") + flag + " " + one_line(value) + ": " + e.what());
    }
  }
  auto fmt = [&](double v) {
    std::ostringstream s;
    s << std::setprecision(6) << v;
    return s.str();
  };
  const auto lo_probe = prober.probe(at(o.lo), o.key + "=" + o.lo);
  const auto hi_probe = prober.probe(at(o.hi), o.key + "=" + o.hi);
  const std::string decoder = prober.load({}).model.decoder;
  out.rep = single_run(lo_probe.verdict == Verdict::kFail ? lo_probe : hi_probe, 2,
                       (lo_probe.verdict == Verdict::kFail) + (hi_probe.verdict == Verdict::kFail), decoder);
  if (lo_probe.verdict == hi_probe.verdict || lo_probe.verdict == Verdict::kUnknown ||
      hi_probe.verdict == Verdict::kUnknown) {
    out.summary = "both ends " + to_string(lo_probe.analysis.outcome) + "/" + to_string(hi_probe.analysis.outcome) +
                  ": no pass/fail boundary in [" + o.lo + ", " + o.hi + "]";
    out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), at(o.hi)));
    return out;
  }
  // Only one end failed; from here on that failure is the one bisected.
  out.rep.failures = 1;
  out.rep.rate = 1.0;
  out.rep.runs = 1;
  Search search(prober, out.rep, out.rep.sig);
  const bool fail_high = hi_probe.verdict == Verdict::kFail;
  std::string pass_value, fail_value;
  if (integral) {
    // Map so that failing values are the high end.
    auto value = [&](int64_t x) { return fail_high ? x : ihi - (x - ilo); };
    const auto r = find_first_failing(ilo, ihi, [&](int64_t x) {
      const std::string v = std::to_string(value(x));
      return search.verdict(at(v), o.key + "=" + v, /*fresh=*/false);
    });
    if (!r.note.empty()) out.doubts.push_back(r.note);
    fail_value = std::to_string(value(*r.first_fail));
    pass_value = std::to_string(value(*r.first_fail - 1));
  } else {
    double pass = fail_high ? dlo : dhi, bad = fail_high ? dhi : dlo;
    for (int i = 0; i < 12 && std::fabs(bad - pass) > 1e-3 * std::max(std::fabs(bad), std::fabs(pass)); ++i) {
      const double mid = 0.5 * (pass + bad);
      const Verdict v = search.verdict(at(fmt(mid)), o.key + "=" + fmt(mid), /*fresh=*/false);
      if (v != Verdict::kPass && v != Verdict::kFail) {
        out.doubts.push_back(o.key + "=" + fmt(mid) + " could not be decided (" + to_string(v) +
                             "): the boundary lies in [" + fmt(std::min(pass, bad)) + ", " + fmt(std::max(pass, bad)) +
                             "]");
        break;
      }
      (v == Verdict::kFail ? bad : pass) = mid;
    }
    pass_value = fmt(pass);
    fail_value = fmt(bad);
  }
  out.found = true;
  // Confirm both sides of the boundary with fresh probes.
  const bool pass_ok =
      search.verdict(at(pass_value), "re-check: " + o.key + "=" + pass_value, /*fresh=*/true) == Verdict::kPass;
  if (!pass_ok) out.doubts.push_back("re-check: " + o.key + "=" + pass_value + " did not pass when run again");
  const bool fail_ok =
      search.verdict(at(fail_value), "re-check: " + o.key + "=" + fail_value, /*fresh=*/true) == Verdict::kFail;
  if (!fail_ok) {
    out.doubts.push_back("re-check: " + o.key + "=" + fail_value + " did not fail the same way when run again");
  }
  out.confirmed = pass_ok && fail_ok;
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  conclude(out, 1.0);
  out.result = {{"key", o.key}, {"last_passing", pass_value}, {"first_failing", fail_value},
                {"fails_above", fail_high}};
  out.summary = "`" + o.key + "` passes at " + pass_value + " and fails at " + fail_value;
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), at(fail_value)));
  return out;
}

}  // namespace

int bisect_command(const BisectOptions& o, BisectAnswer* answer) {
  const auto t0 = std::chrono::steady_clock::now();
  // The output folder: locked while the bisection writes it, and what the
  // bisection created of it removed unless it ends with an answer (or an
  // interruption, whose interrupted.json stays).
  std::optional<OutputDir> claim;
  return run_search(claim, [&]() -> int {
    if (o.replay_from_start && o.kind != "steps" && o.kind != "modules") {
      throw UsageError("bisect " + o.kind + ": --replay-from-start: expected kind steps or modules (only they replay)");
    }
    // Flags another kind reads: given here they would be silently ignored.
    const auto refuse = [&](bool given, const char* flag, const char* kinds) {
      if (given) throw UsageError("bisect " + o.kind + ": " + flag + ": expected kind " + kinds + " (only it reads " +
                                  flag + "), got kind " + o.kind);
    };
    if (o.kind != "config") {
      refuse(!o.good.empty(), "--good", "config");
      refuse(!o.bad.empty(), "--bad", "config");
    }
    if (o.kind != "range") {
      refuse(!o.key.empty(), "--key", "range");
      refuse(!o.lo.empty(), "--lo", "range");
      refuse(!o.hi.empty(), "--hi", "range");
    }
    const std::string name = o.scenario.empty() ? "config" : fs::path(o.scenario).stem().string();
    std::vector<std::string> datasets;  // the scenario's dataset folders, never written into
    if (!o.scenario.empty()) {
      const Scenario s = load_scenario(o.scenario, o.overrides);  // validate first
      datasets = dataset_folders(s);
      // What this kind asks of the training, refused before anything runs
      // when the scenario's own worker cannot serve it.
      std::vector<std::pair<std::string, std::string>> needs;
      const std::string what = "dbh bisect " + o.kind;
      if (o.kind == "steps" || o.kind == "modules") {
        needs.emplace_back(capability::kStopAfter, what);
        if (!o.replay_from_start) {
          needs.emplace_back(capability::kCheckpoint, what);
          needs.emplace_back(capability::kResume, what);
        }
      }
      if (o.kind == "modules") needs.emplace_back(capability::kMonitorsLocalise, what);
      if (o.kind == "data") needs.emplace_back(capability::kSubset, what);
      for (const auto& note : check_worker(s, needs)) std::cerr << what << ": note: " << note << "\n";
    }
    const fs::path out = o.out.empty() ? fs::path(default_output_folder("bisect-" + o.kind + "-" + name)) : fs::path(o.out);
    check_outside_datasets("dbh bisect", "--out", out.string(), datasets);
    check_outside_datasets("dbh bisect", "--cache", o.cache_dir.empty() ? default_probe_cache() : o.cache_dir, datasets);
    // Continued, not replaced: each bisection keeps its probes in its own
    // session folder (probes/<session>), and a kept reproduction's
    // checkpoints (--keep-checkpoints) stay for the repro commands that name
    // them; the top-level reports are the latest bisection's.
    claim.emplace(out,
                  "bisect " + o.kind + " " +
                      (o.scenario.empty() ? std::string("config")
                                          : fs::absolute(o.scenario).lexically_normal().string()),
                  OutputDir::Reuse::kContinue);
    const std::string cache = o.cache_dir.empty() ? default_probe_cache() : o.cache_dir;
    BisectOptions opts = o;
    opts.cache_dir = cache;
    std::unique_ptr<Prober> prober;
    if (o.kind != "config") {
      prober = std::make_unique<Prober>(o.scenario, o.overrides, out.string(), cache, o.quiet);
      prober->set_keep_checkpoints(o.keep_checkpoints);
      // A range or configuration can fail by learning too little as well as
      // by crashing (Note [Metric expectations in bisection]).
      prober->set_judge_metrics(o.kind == "range");
    }
    if (!o.quiet) std::cout << "dbh bisect " << o.kind << ": " << (o.scenario.empty() ? "" : o.scenario) << std::endl;
    Outputs result;
    if (o.kind == "steps") {
      result = bisect_steps(*prober, opts);
    } else if (o.kind == "modules") {
      result = bisect_modules(*prober, opts);
    } else if (o.kind == "data") {
      result = bisect_data(*prober, opts);
    } else if (o.kind == "config") {
      result = bisect_config(opts, prober, out);
    } else if (o.kind == "range") {
      result = bisect_range(*prober, opts);
    } else {
      throw ScenarioError("bisect: expected steps, modules, data, config or range, got " + o.kind);
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
      answer->method = result.result.is_object() ? result.result.value("method", std::string()) : std::string();
      if (result.result.is_object() && result.result.contains("samples") && result.result["samples"].is_array()) {
        for (const auto& smp : result.result["samples"]) answer->samples.push_back(smp.value("index", int64_t{0}));
      }
    }
    return code;
  });
}

}  // namespace dbh::harness
