#include "harness/bisect/bisect_command.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/bisect/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/report/report.h"
#include "model/data/scan.h"

namespace dbh::harness {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string stamp() { return timestamp_compact(); }

std::string quote(const std::string& s) { return shell_quote(s); }

std::string command_line(const std::string& scenario, const std::vector<std::string>& overrides) {
  // A later override of the same key wins; print each key once, last value.
  std::vector<std::string> kept;
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string key = overrides[i].substr(0, overrides[i].find('='));
    bool later = false;
    for (size_t j = i + 1; j < overrides.size(); ++j) {
      later = later || overrides[j].substr(0, overrides[j].find('=')) == key;
    }
    if (!later) kept.push_back(overrides[i]);
  }
  std::string cmd = "dbh run " + quote(scenario);
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

// How reliably the failure reproduces, and how many repetitions each probe
// needs so that a passing verdict is wrong with probability <= alpha.
struct Reproduction {
  ProbeResult baseline;
  int64_t runs = 0;
  int64_t failures = 0;
  double rate = 0;
  int64_t per_probe = 1;
  bool flaky = false;
};

Reproduction reproduce(Prober& prober, const std::vector<std::string>& extra, const BisectOptions& o,
                       bool fresh_first) {
  Reproduction r;
  r.baseline = fresh_first ? prober.probe_repeated(extra, "reproduce the failure", 1)
                           : prober.probe(extra, "reproduce the failure");
  r.runs = 1;
  r.failures = r.baseline.verdict == Verdict::kFail ? 1 : 0;
  for (int64_t i = 1; i < o.reproductions; ++i) {
    const auto p = prober.probe_repeated(extra, "reproduction rate, run " + std::to_string(i + 1), 1);
    ++r.runs;
    r.failures += p.verdict == Verdict::kFail ? 1 : 0;
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

Verdict probe_verdict(Prober& prober, const Reproduction& rep, const std::vector<std::string>& extra,
                      const std::string& what, ProbeResult* out = nullptr) {
  const ProbeResult p = rep.per_probe > 1 ? prober.probe_repeated(extra, what, rep.per_probe)
                                          : prober.probe(extra, what);
  if (out) *out = p;
  return p.verdict;
}

ojson probes_json(const Prober& prober) {
  ojson a = ojson::array();
  for (const auto& p : prober.history()) {
    a.push_back({{"index", p.index},
                 {"what", p.what},
                 {"config", p.overrides},
                 {"outcome", to_string(p.analysis.outcome)},
                 {"class", p.analysis.failure.klass},
                 {"step", p.analysis.failure.step ? ojson(*p.analysis.failure.step) : ojson(nullptr)},
                 {"module", p.analysis.failure.module},
                 {"seconds", p.seconds},
                 {"cached", p.cached},
                 {"hash", p.hash}});
  }
  return a;
}

struct Outputs {
  std::string kind;
  ojson result;
  bool found = false;
  double confidence = 0;
  Reproduction rep;
  std::string repro;
  std::string summary;                 // one paragraph for bisect.md
  std::vector<std::string> details;    // bullet lines
};

int finish(const Outputs& o, const Prober& prober, const fs::path& out, double seconds) {
  ojson j;
  j["schema_version"] = 1;
  j["kind"] = o.kind;
  j["scenario"] = prober.scenario_path();
  j["overrides"] = prober.base_overrides();
  j["result"] = o.result;
  j["found"] = o.found;
  j["confidence"] = o.confidence;
  j["reproduction"] = {{"runs", o.rep.runs}, {"failures", o.rep.failures}, {"rate", o.rep.rate},
                       {"flaky", o.rep.flaky}, {"repetitions_per_probe", o.rep.per_probe}};
  j["probes"] = probes_json(prober);
  int64_t fresh = 0;
  for (const auto& p : prober.history()) fresh += p.cached ? 0 : 1;
  j["probe_count"] = prober.history().size();
  j["fresh_probes"] = fresh;
  j["seconds"] = seconds;
  j["repro"] = o.repro;
  write_file_atomically((out / "bisect.json").string(), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::ostringstream md;
  md << "## Bisection: " << o.kind << "\n\n" << o.summary << "\n\n";
  for (const auto& d : o.details) md << "- " << d << "\n";
  md << "\nReproduction: " << o.rep.failures << " of " << o.rep.runs << " runs failed"
     << (o.rep.flaky ? " (flaky: " + std::to_string(o.rep.per_probe) + " repetitions per probe)" : "")
     << ". Confidence " << std::fixed << std::setprecision(3) << o.confidence << ".\n\n";
  md << "| probe | config | outcome | step | module | seconds |\n|---|---|---|---|---|---|\n";
  for (const auto& p : prober.history()) {
    std::string cfg;
    for (const auto& x : p.overrides) cfg += (cfg.empty() ? "" : " ") + x;
    if (cfg.size() > 80) cfg = cfg.substr(0, 77) + "...";
    md << "| " << p.index << " | `" << (cfg.empty() ? "(scenario)" : cfg) << "` | " << to_string(p.analysis.outcome)
       << (p.analysis.failure.klass.empty() ? "" : " " + p.analysis.failure.klass) << " | "
       << (p.analysis.failure.step ? std::to_string(*p.analysis.failure.step) : "-") << " | "
       << (p.analysis.failure.module.empty() ? "-" : p.analysis.failure.module) << " | " << std::setprecision(1)
       << p.seconds << (p.cached ? " (cached)" : "") << " |\n";
  }
  md << "\nReproduce the minimal failure:\n\n```sh\n" << o.repro << "\n```\n";
  write_file_atomically((out / "bisect.md").string(), md.str());
  std::cout << (o.found ? "result: " : "no result: ") << o.summary << "\n"
            << "probes: " << prober.history().size() << " (" << fresh << " run, "
            << prober.history().size() - static_cast<size_t>(fresh) << " cached) in " << std::fixed
            << std::setprecision(1) << seconds << " s; confidence " << std::setprecision(3) << o.confidence
            << "\nreport: " << (out / "bisect.md").string() << "\nrepro:  " << o.repro << std::endl;
  return o.found ? 0 : 1;
}

// Nearest checkpoint written by `probe` whose step count is <= limit.
std::optional<std::pair<int64_t, std::string>> nearest_checkpoint(const ProbeResult& probe, int64_t limit) {
  if (probe.dir.empty() || !fs::exists(probe.dir)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& e : fs::directory_iterator(probe.dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint-r0-s", 0) != 0 || e.path().extension() != ".pt") continue;
    int64_t step = 0;
    const std::string digits = name.substr(15, name.size() - 15 - 3);
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc()) continue;
    if (step <= limit && (!best || step > best->first)) best = std::make_pair(step, e.path().string());
  }
  return best;
}

std::vector<std::string> replay_overrides(const ProbeResult& baseline, int64_t stop_after) {
  std::vector<std::string> o = {"train.stop_after=" + std::to_string(stop_after), "train.checkpoint_every=0"};
  if (const auto ck = nearest_checkpoint(baseline, stop_after - 1)) {
    o.push_back("train.resume_from=" + ck->second);
  }
  return o;
}

Outputs bisect_steps(Prober& prober, const BisectOptions& o, int64_t* failing_step, ProbeResult* baseline_out) {
  Outputs out;
  out.kind = "steps";
  const Scenario s = prober.load({});
  if (s.repeat.in_process != 1) throw ScenarioError("bisect steps: expected repeat.in_process 1, got " + std::to_string(s.repeat.in_process));
  const int64_t n = s.train.max_steps;
  const int64_t every = std::max<int64_t>(1, n / 8);
  const std::vector<std::string> with_ckpt = {"train.checkpoint_every=" + std::to_string(every)};
  out.rep = reproduce(prober, with_ckpt, o, /*fresh_first=*/true);
  if (baseline_out) *baseline_out = out.rep.baseline;
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce (" + std::to_string(out.rep.runs) + " runs passed)";
    out.repro = command_line(prober.scenario_path(), prober.base_overrides());
    return out;
  }
  const auto hint = out.rep.baseline.analysis.failure.step;
  int64_t passes = 0;
  auto fails = [&](int64_t m) {
    const Verdict v = probe_verdict(prober, out.rep, replay_overrides(out.rep.baseline, m),
                                    "first " + std::to_string(m) + " step(s)");
    passes += v == Verdict::kPass ? 1 : 0;
    return v;
  };
  const auto r = find_first_failing(1, n, fails);
  if (!r.first_fail) {
    out.summary = "no failing prefix found: " + r.note;
    out.repro = command_line(prober.scenario_path(), prober.base_overrides());
    return out;
  }
  const int64_t step = *r.first_fail - 1;
  // Re-check both ends of the boundary.
  bool consistent = true;
  if (step >= 1) {
    consistent = fails(step) == Verdict::kPass;
  }
  consistent = consistent && fails(*r.first_fail) == Verdict::kFail;
  out.found = consistent;
  out.confidence = consistent ? confidence(out.rep, passes) : 0.0;
  if (failing_step) *failing_step = step;
  out.result = {{"step", step},
                {"monitor_step", hint ? ojson(*hint) : ojson(nullptr)},
                {"agrees_with_monitors", hint && *hint == step},
                {"class", out.rep.baseline.analysis.failure.klass},
                {"flaky_boundary", !consistent}};
  out.summary = consistent ? "the first failing step is **" + std::to_string(step) + "** (class `" +
                                 out.rep.baseline.analysis.failure.klass + "`)"
                           : "flaky boundary near step " + std::to_string(step) +
                                 ": re-checking the ends gave inconsistent verdicts";
  if (hint) {
    out.details.push_back(std::string("the monitors of the full run flagged step ") + std::to_string(*hint) +
                          (*hint == step ? " (agrees)" : " (differs)"));
  }
  out.details.push_back("replays resume from checkpoints written every " + std::to_string(every) +
                        " steps by the first run");
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), replay_overrides(out.rep.baseline, step + 1)));
  return out;
}

Outputs bisect_modules(Prober& prober, const BisectOptions& o) {
  int64_t step = -1;
  ProbeResult baseline;
  Outputs steps = bisect_steps(prober, o, &step, &baseline);
  Outputs out;
  out.kind = "modules";
  out.rep = steps.rep;
  if (!steps.found) {
    out.summary = "no failing step to replay: " + steps.summary;
    out.repro = steps.repro;
    return out;
  }
  auto extra = replay_overrides(baseline, step + 1);
  extra.push_back("monitors.mode=localise");
  ProbeResult replay;
  probe_verdict(prober, out.rep, extra, "localise replay of step " + std::to_string(step), &replay);
  const auto& h = replay.analysis.primary_health;
  if (h.is_null() || h.empty()) {
    out.summary = "the replay of step " + std::to_string(step) + " failed without a non-finite tensor (" +
                  to_string(replay.analysis.outcome) + ": " + replay.analysis.failure.message + ")";
    out.result = {{"step", step}, {"module", replay.analysis.failure.module}};
    out.found = !replay.analysis.failure.module.empty();
    out.confidence = steps.confidence;
    out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), extra));
    return out;
  }
  const std::string kind = h.value("kind", "");
  const std::string direction = kind == "gradient" ? "backward" : kind == "activation" ? "forward" : "inputs";
  out.found = true;
  out.confidence = steps.confidence;
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
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), extra));
  return out;
}

Outputs bisect_data(Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = "data";
  const Scenario s = prober.load({});
  if (s.data.source != "real") {
    throw ScenarioError("bisect data: expected data.source real, got " + s.data.source);
  }
  out.rep = reproduce(prober, {}, o, false);
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce";
    out.repro = command_line(prober.scenario_path(), prober.base_overrides());
    return out;
  }
  const auto policy = s.data.on_invalid == "skip" ? model::OnInvalid::kSkip
                      : s.data.on_invalid == "clip" ? model::OnInvalid::kClip
                                                    : model::OnInvalid::kError;
  auto scan = model::scan_dataset(s.data.path, policy, {}, /*check_images=*/false);
  std::vector<model::ImageAnnotation> images = scan.images;
  const auto& fail = out.rep.baseline.analysis;
  const int64_t last_step = fail.failure.step ? *fail.failure.step : s.train.max_steps - 1;
  // The samples the failing run consumed, in order of first use.
  std::vector<int64_t> consumed;
  std::set<int64_t> seen;
  const int64_t n = static_cast<int64_t>(images.size());
  for (int64_t micro = 0; micro < (last_step + 1) * s.train.accumulation; ++micro) {
    for (const int64_t i : model::batch_indices(n, s.data.batch_size, s.train.seed, micro)) {
      if (seen.insert(i).second) consumed.push_back(i);
    }
  }
  std::sort(consumed.begin(), consumed.end());
  auto subset_overrides = [&](const std::vector<int64_t>& subset) {
    // Enough steps to consume every sample once, and at least up to the
    // failing step so the scenario's fault schedule stays valid.
    const int64_t steps = std::max<int64_t>(
        {int64_t{1}, (static_cast<int64_t>(subset.size()) + s.data.batch_size - 1) / s.data.batch_size,
         std::min(last_step + 1, s.train.max_steps)});
    return std::vector<std::string>{"data.subset=" + list_yaml(subset),
                                    "train.max_steps=" + std::to_string(steps), "controls=[]"};
  };
  int64_t passes = 0;
  const auto r = ddmin(consumed.size(), [&](const std::vector<size_t>& idx) {
    std::vector<int64_t> subset;
    for (size_t k : idx) subset.push_back(consumed[k]);
    std::string what = "samples " + list_yaml(subset);
    if (what.size() > 44) what = std::to_string(subset.size()) + " samples";
    const Verdict v = probe_verdict(prober, out.rep, subset_overrides(subset), what);
    passes += v == Verdict::kPass ? 1 : 0;
    return v;
  });
  std::vector<int64_t> minimal;
  for (size_t k : r.minimal) minimal.push_back(consumed[k]);
  out.found = r.reproduced;
  out.confidence = confidence(out.rep, passes);
  ojson samples = ojson::array();
  std::string names;
  for (const int64_t i : minimal) {
    const auto& im = images[static_cast<size_t>(i)];
    std::vector<std::string> ids;
    for (const auto& w : im.words) ids.push_back(w.id);
    samples.push_back({{"index", i}, {"file", im.file}, {"annotation_ids", ids}});
    names += (names.empty() ? "" : ", ") + im.file;
  }
  out.result = {{"samples", samples}, {"consumed", consumed.size()}, {"class", fail.failure.klass}};
  out.summary = r.reproduced ? "a 1-minimal failing subset of the " + std::to_string(consumed.size()) +
                                   " samples the run consumed: **" + names + "** (index " + list_yaml(minimal) + ")"
                             : "training on the consumed samples alone does not fail";
  out.details.push_back("the failing run consumed " + std::to_string(consumed.size()) + " samples up to step " +
                        std::to_string(last_step));
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), subset_overrides(minimal)));
  return out;
}

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
  const auto good_probe = prober->probe({}, "good configuration");
  const auto bad_probe = prober->probe(diffs, "bad configuration (all " + std::to_string(diffs.size()) + " differences)");
  out.rep.baseline = bad_probe;
  out.rep.runs = 1;
  out.rep.failures = bad_probe.verdict == Verdict::kFail ? 1 : 0;
  out.rep.rate = out.rep.failures;
  if (good_probe.verdict != Verdict::kPass || bad_probe.verdict != Verdict::kFail || diffs.empty()) {
    out.summary = "expected the good configuration to pass and the bad one to fail, got " +
                  to_string(good_probe.analysis.outcome) + " and " + to_string(bad_probe.analysis.outcome) +
                  (diffs.empty() ? " (no differing keys)" : "");
    out.repro = command_line(base, concat(prober->base_overrides(), diffs));
    return out;
  }
  const auto r = ddmin(diffs.size(), [&](const std::vector<size_t>& idx) {
    std::vector<std::string> subset;
    std::string what;
    for (size_t k : idx) {
      subset.push_back(diffs[k]);
      what += (what.empty() ? "" : " ") + diffs[k];
    }
    if (what.size() > 44) what = std::to_string(subset.size()) + " keys";
    return prober->probe(subset, what).verdict;
  });
  std::vector<std::string> minimal;
  for (size_t k : r.minimal) minimal.push_back(diffs[k]);
  out.found = r.reproduced;
  out.confidence = 1.0;
  out.result = {{"difference", minimal}, {"differing_keys", diffs.size()}};
  std::string text;
  for (const auto& m : minimal) text += (text.empty() ? "" : " + ") + std::string("`") + m + "`";
  out.summary = "a 1-minimal failure-inducing difference: " + text;
  out.details.push_back(std::to_string(diffs.size()) + " keys differ between the good and the bad configuration");
  out.repro = command_line(base, concat(prober->base_overrides(), minimal));
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
  if (!(dlo < dhi)) throw ScenarioError("bisect range: expected --lo < --hi, got " + o.lo + " and " + o.hi);
  auto at = [&](const std::string& v) { return std::vector<std::string>{o.key + "=" + v}; };
  auto fmt = [&](double v) {
    std::ostringstream s;
    s << std::setprecision(6) << v;
    return s.str();
  };
  const auto lo_probe = prober.probe(at(o.lo), o.key + "=" + o.lo);
  const auto hi_probe = prober.probe(at(o.hi), o.key + "=" + o.hi);
  out.rep.baseline = lo_probe.verdict == Verdict::kFail ? lo_probe : hi_probe;
  out.rep.runs = 2;
  out.rep.failures = (lo_probe.verdict == Verdict::kFail) + (hi_probe.verdict == Verdict::kFail);
  out.rep.rate = 1.0;
  if (lo_probe.verdict == hi_probe.verdict || lo_probe.verdict == Verdict::kUnknown ||
      hi_probe.verdict == Verdict::kUnknown) {
    out.summary = "both ends " + to_string(lo_probe.analysis.outcome) + "/" + to_string(hi_probe.analysis.outcome) +
                  ": no pass/fail boundary in [" + o.lo + ", " + o.hi + "]";
    out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), at(o.hi)));
    return out;
  }
  const bool fail_high = hi_probe.verdict == Verdict::kFail;
  std::string pass_value, fail_value;
  if (integral) {
    // Map so that failing values are the high end.
    auto value = [&](int64_t x) { return fail_high ? x : ihi - (x - ilo); };
    const auto r = find_first_failing(ilo, ihi, [&](int64_t x) {
      const std::string v = std::to_string(value(x));
      return prober.probe(at(v), o.key + "=" + v).verdict;
    });
    fail_value = std::to_string(value(*r.first_fail));
    pass_value = std::to_string(value(*r.first_fail - 1));
  } else {
    double pass = fail_high ? dlo : dhi, bad = fail_high ? dhi : dlo;
    for (int i = 0; i < 12 && std::fabs(bad - pass) > 1e-3 * std::max(std::fabs(bad), std::fabs(pass)); ++i) {
      const double mid = 0.5 * (pass + bad);
      const auto v = prober.probe(at(fmt(mid)), o.key + "=" + fmt(mid)).verdict;
      (v == Verdict::kFail ? bad : pass) = mid;
    }
    pass_value = fmt(pass);
    fail_value = fmt(bad);
  }
  out.found = true;
  out.confidence = 1.0;
  out.result = {{"key", o.key}, {"last_passing", pass_value}, {"first_failing", fail_value},
                {"fails_above", fail_high}};
  out.summary = "`" + o.key + "` passes at " + pass_value + " and fails at " + fail_value;
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), at(fail_value)));
  return out;
}

}  // namespace

int bisect_command(const BisectOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const std::string name = o.scenario.empty() ? "config" : fs::path(o.scenario).stem().string();
    if (!o.scenario.empty()) (void)load_scenario(o.scenario, o.overrides);  // validate first
    const fs::path out = o.out.empty() ? fs::path("reports") / "runs" / ("bisect-" + o.kind + "-" + name + "-" + stamp())
                                       : fs::path(o.out);
    fs::create_directories(out);
    const std::string cache = o.cache_dir.empty() ? (fs::path("reports") / "cache" / "probes").string() : o.cache_dir;
    BisectOptions opts = o;
    opts.cache_dir = cache;
    std::unique_ptr<Prober> prober;
    if (o.kind != "config") prober = std::make_unique<Prober>(o.scenario, o.overrides, out.string(), cache, o.quiet);
    if (!o.quiet) std::cout << "dbh bisect " << o.kind << ": " << (o.scenario.empty() ? "" : o.scenario) << std::endl;
    Outputs result;
    if (o.kind == "steps") {
      result = bisect_steps(*prober, opts, nullptr, nullptr);
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
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return finish(result, *prober, out, seconds);
  } catch (const UsageError& e) {
    std::cerr << "dbh: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace dbh::harness
