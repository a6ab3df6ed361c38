// The parts every kind of bisection shares (bisect/parts.h).
#include "harness/bisect/parts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/proto/event_types.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/text.h"
#include "harness/scenario/schema.h"
#include "model/observed_modules.h"

namespace dbh::harness::bisect {
namespace fs = std::filesystem;

std::string command_line(const std::string& scenario, const std::vector<std::string>& overrides) {
  // A later override of the same key wins; print each key once, last value.
  std::vector<std::string> kept;
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string key = override_key(overrides[i]);
    bool later = false;
    for (size_t j = i + 1; j < overrides.size(); ++j) later = later || override_key(overrides[j]) == key;
    if (!later) kept.push_back(overrides[i]);
  }
  std::string cmd = shell_quote(self_command()) + " run " + shell_quote(scenario);
  for (const auto& o : kept) cmd += " " + shell_quote(o);
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
std::vector<std::string> modules_named(const std::string& message, model::DecoderKind decoder) {
  std::vector<std::string> out;
  for (const auto& m : model::observed_modules(decoder)) {
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

std::string Signature::text() const {
  std::string t = "`" + (klass.empty() ? std::string("failure") : klass) + "`";
  if (before_training) t += " before training";
  if (check_step && step) t += " at step " + std::to_string(*step);
  if (!files.empty()) t += " naming " + join(files, ", ");
  if (!modules.empty()) t += " in " + join(modules, ", ");
  return t;
}

// Note [One failure identity]: a failure is what a user would call the same
// failure, its class and the cause it names, for every search (steps,
// modules, data, config, range, diagnose). The file a message names is the
// cause only where the class says the file is broken (`data_invalid`: this
// image cannot be read); elsewhere it is the sample where a symptom showed
// first (a label fault that degrades every sample names whichever is judged
// first, and the seed moves that), recorded as evidence, never a different
// failure. The step is part of it only for a replay of one configuration
// (check_step), and a divergence's site only there too (Note [One
// divergence]).
bool file_is_the_cause(const std::string& klass) { return klass == "data_invalid"; }

Signature signature_of(const probe::ProbeResult& p, model::DecoderKind decoder, bool check_step) {
  Signature s;
  const auto& f = p.analysis.failure;
  s.klass = f.klass;
  s.step = f.step;
  s.check_step = check_step;
  s.before_training = probe::failed_before_training(p.analysis);
  if (file_is_the_cause(f.klass)) s.files = files_named(f.message);
  s.modules = modules_named(f.message, decoder);
  return s;
}

// Note [One divergence]: where a diverging run's first non-finite value
// shows (an activation in the forward pass, a gradient in the backward pass,
// the loss, and in which module), or whether its loss explodes while still
// finite, moves with the decoder, the precision or the step the run reaches.
// Across configurations (config and range bisection, which do not pin the
// step) that is one failure; a replay of one configuration (steps, modules)
// must still show the same class and site.
//
// Why the failing probe `p` is not the failure `sig` ("" when it is).
std::string difference(const probe::ProbeResult& p, const Signature& sig) {
  const auto& f = p.analysis.failure;
  const bool one_divergence =
      !sig.check_step && supervisor::is_divergence(sig.klass) && supervisor::is_divergence(f.klass);
  if (f.klass != sig.klass && !one_divergence) return "class `" + f.klass + "` instead of `" + sig.klass + "`";
  if (probe::failed_before_training(p.analysis) != sig.before_training) {
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

probe::Verdict judge(const probe::ProbeResult& p, const Signature& sig) {
  if (p.verdict != probe::Verdict::kFail) return p.verdict;
  return difference(p, sig).empty() ? probe::Verdict::kFail : probe::Verdict::kDifferent;
}

// ---------------------------------------------------------------------------
// Reproduction: how reliably the failure reproduces, and how many repetitions
// each probe needs so that a passing verdict is wrong with probability <= alpha.

Reproduction reproduce(probe::Prober& prober, const ReproducePlan& plan, const BisectOptions& o, model::DecoderKind decoder) {
  Reproduction r;
  std::vector<probe::ProbeResult> runs;
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
    if (candidate.verdict != probe::Verdict::kFail) continue;
    const Signature sig = signature_of(candidate, decoder, plan.check_step);
    int64_t same = 0;
    for (const auto& p : runs) same += judge(p, sig) == probe::Verdict::kFail ? 1 : 0;
    if (same > best) {
      best = same;
      r.baseline = candidate;
    }
  }
  r.sig = signature_of(r.baseline, decoder, plan.check_step);
  r.runs = static_cast<int64_t>(runs.size());
  for (const auto& p : runs) {
    const probe::Verdict v = judge(p, r.sig);
    if (v == probe::Verdict::kFail) ++r.failures;
    if (v == probe::Verdict::kDifferent) {
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

Upcoming Search::ahead(ProbeOf probe_of) const {
  if (prober_.jobs() <= 1 || rep_.per_probe > 1) return nullptr;
  return [&prober = prober_, probe_of = std::move(probe_of)](const std::vector<std::vector<size_t>>& subsets) {
    std::vector<std::pair<std::vector<std::string>, std::string>> upcoming;
    for (const auto& subset : subsets) upcoming.push_back(probe_of(subset));
    prober.run_ahead(upcoming, probe::Prober::Own::kFirstInList);
  };
}

probe::Verdict Search::verdict(const std::vector<std::string>& extra, const std::string& what, bool fresh,
                       probe::ProbeResult* last) {
  const int64_t k = rep_.per_probe;
  bool unknown = false, different = false;
  for (int64_t i = 0; i < k; ++i) {
    const std::string label = what + (k > 1 ? " [" + std::to_string(i + 1) + "/" + std::to_string(k) + "]" : "");
    const probe::ProbeResult p = (fresh || k > 1) ? prober_.probe_fresh(extra, label) : prober_.probe(extra, label);
    if (last) *last = p;
    const probe::Verdict v = judge(p, sig_);
    auto& seen = seen_[join(extra, " ")];
    seen.what = what;
    if (v == probe::Verdict::kPass) ++seen.passes;
    if (v == probe::Verdict::kFail) ++seen.fails;
    if (v == probe::Verdict::kFail) return v;
    if (v == probe::Verdict::kDifferent) {
      different = true;
      if (notes_.size() < 8) {
        notes_.push_back("probe " + std::to_string(p.index) + " (" + what +
                         ") failed differently: " + difference(p, sig_));
      }
    }
    unknown = unknown || v == probe::Verdict::kUnknown;
  }
  if (different) return probe::Verdict::kDifferent;
  if (unknown) return probe::Verdict::kUnknown;
  ++passes_;
  return probe::Verdict::kPass;
}

std::vector<std::string> Search::contradictions() const {
  std::vector<std::string> out;
  for (const auto& [config, seen] : seen_) {
    if (seen.passes > 0 && seen.fails > 0 && !rep_.flaky) {
      out.push_back("`" + seen.what + "` both passed (" + std::to_string(seen.passes) + "x) and failed (" +
                    std::to_string(seen.fails) + "x)");
    }
  }
  return out;
}

// The step of a checkpoint the worker wrote ("checkpoint-r0-s16.pt" → 16);
// none for another file.
std::optional<int64_t> checkpoint_step(const fs::path& file) {
  // Note [Checkpoint names]: the runs a bisection replays are run 0.
  const auto name = proto::parse_checkpoint_file_name(file.filename().string());
  if (!name || name->run != 0) return std::nullopt;
  return name->step;
}

// The checkpoint step `p`'s trial resumed from; none when it started at step
// 0 or was answered from a cache (it ran nothing).
std::optional<int64_t> resumed_from(const probe::ProbeResult& p) {
  if (p.cached) return std::nullopt;
  std::optional<int64_t> step;
  for (const auto& o : p.overrides) {
    const std::string key = scenario::override_text(DBH_SCENARIO_KEY(train.resume_from), "");
    if (o.rfind(key, 0) == 0) step = checkpoint_step(o.substr(key.size()));
  }
  return step;
}

// Optimizer steps `p`'s trial executed after it resumed (not the absolute step
// index): those that ended, and the one a failure cut short. 0 when cached.
int64_t steps_run(const probe::ProbeResult& p) {
  if (p.cached) return 0;
  const auto& a = p.analysis;
  const bool cut_short = a.failure.step && (a.steps.empty() || *a.failure.step > a.steps.back().step);
  return a.steps_completed + (cut_short ? 1 : 0);
}

// What the probes that ran executed, and what they would have executed had
// each started at step 0: the same replay, deterministic, runs the steps
// before its checkpoint as well (a replay stopped early by the failure stops
// there from step 0 too, so this is not always its train.stop_after).

}  // namespace dbh::harness::bisect
