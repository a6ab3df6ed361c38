// Bisection over configurations: the difference between a passing and a
// failing configuration (config), or the boundary of one numeric key (range)
// (bisect/parts.h).
#include "harness/bisect/parts.h"
#include "harness/probe/cluster.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/common/value.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::bisect {
namespace fs = std::filesystem;

namespace {

// key → value text for every leaf that a config difference can override.
void flatten(const ojson& j, const std::string& prefix, std::map<std::string, std::string>* out) {
  static const std::set<std::string> kSkip = {"name", "description", "expect", "controls"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (prefix.empty() && kSkip.count(it.key())) continue;
    if (key == DBH_SCENARIO_KEY(worker.overrides) && it->is_object()) {
      // The user's own keys (Note [The user's own names]): each difference
      // is the override as the user writes it.
      for (auto u = it->begin(); u != it->end(); ++u) (*out)[u.key()] = u->is_string() ? u->get<std::string>() : u->dump();
      continue;
    }
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
Reproduction single_run(const probe::ProbeResult& failing, int64_t runs, int64_t failures, model::DecoderKind decoder) {
  Reproduction r;
  r.baseline = failing;
  r.source = failing;
  r.sig = signature_of(failing, decoder, /*check_step=*/false);
  r.runs = runs;
  r.failures = failures;
  r.rate = runs > 0 ? static_cast<double>(failures) / static_cast<double>(runs) : 0.0;
  return r;
}

// The two configurations `bisect config` compares: the good one (a scenario
// file, or the scenario with --good's overrides) and the bad one, and the
// keys that differ between them as `key=value` overrides of the good one.
struct ConfigPair {
  std::string base;                         // the scenario file the probes load
  std::vector<std::string> good_overrides;  // --good's, when it is an override set
  std::vector<std::string> diffs;
  scenario::Scenario bad;                   // the bad configuration, resolved
};

ConfigPair load_config_pair(const BisectOptions& o) {
  ConfigPair pair;
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
  if (is_file(o.good)) {
    pair.base = o.good[0];
  } else {
    if (o.scenario.empty()) throw ScenarioError("bisect config: --good is an override set, so a SCENARIO is needed");
    pair.base = o.scenario;
    pair.good_overrides = split_words(o.good);
  }
  const scenario::Scenario good = scenario::load_scenario(pair.base, concat(o.overrides, pair.good_overrides), o.checks);
  probe::Cluster::take_scenario_defaults(good.cluster);  // (a SCENARIO's were taken already; --good's fill the rest)
  // --bad in the command's own spelling (`--lr 500`, `-o Optimizer.lr=5`): the user's keys it sets (Note [A
  // command's own syntax]); an option the parser in the worker's `hello` does not take is refused before any probe.
  const auto own_words = [&](const std::vector<std::string>& words) {
    if (!good.worker.external()) return words;
    const auto parser = supervisor::describe_worker(good).options;
    return scenario::overrides_from_command_words(good.worker, words, "bisect config --bad", parser);
  };
  const std::vector<std::string> bad_overrides = o.bad_as_overrides ? o.bad
                                                 : is_file(o.bad)   ? std::vector<std::string>{}
                                                                    : own_words(split_words(o.bad));
  pair.bad =
      !o.bad_as_overrides && is_file(o.bad)
          ? scenario::load_scenario(o.bad[0], o.overrides, o.checks)
          : scenario::load_scenario(pair.base, concat(concat(o.overrides, pair.good_overrides), bad_overrides), o.checks);
  std::map<std::string, std::string> g, b;
  flatten(ojson::parse(scenario::resolved_json(good)), "", &g);
  flatten(ojson::parse(scenario::resolved_json(pair.bad)), "", &b);
  for (const auto& [k, v] : b) {
    // Where a probe runs (cluster.*) is the executor's, never a difference in what it computes.
    if (k.rfind("cluster.", 0) == 0) continue;
    const auto it = g.find(k);
    if (it == g.end() || it->second != v) pair.diffs.push_back(k + "=" + v);
  }
  return pair;
}

}  // namespace

Outputs bisect_config(const BisectOptions& o, std::unique_ptr<probe::Prober>& prober, const fs::path& out_dir) {
  Outputs out;
  out.kind = BisectKind::kConfig;
  const ConfigPair pair = load_config_pair(o);
  const std::string& base = pair.base;
  const std::vector<std::string>& good_overrides = pair.good_overrides;
  const std::vector<std::string>& diffs = pair.diffs;
  const scenario::Scenario& bad = pair.bad;
  prober = std::make_unique<probe::Prober>(base, concat(o.overrides, good_overrides), out_dir.string(),
                                    o.cache_dir, o.quiet, o.checks);
  prober->set_keep_checkpoints(o.keep_checkpoints);
  prober->set_judge_metrics(true);
  prober->set_jobs(o.jobs);
  const std::string bad_what = "bad configuration (all " + std::to_string(diffs.size()) + " differences)";
  prober->run_ahead({{diffs, bad_what}});  // beside the good one
  const auto good_probe = prober->probe({}, "good configuration");
  const auto bad_probe = prober->probe(diffs, bad_what);
  out.rep = single_run(bad_probe, 1, bad_probe.verdict == probe::Verdict::kFail ? 1 : 0, pair.bad.model.decoder);
  if (good_probe.verdict != probe::Verdict::kPass || bad_probe.verdict != probe::Verdict::kFail || diffs.empty()) {
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
  auto subset_of = [&](const std::vector<size_t>& idx) {
    std::vector<std::string> subset;
    for (size_t k : idx) subset.push_back(diffs[k]);
    return subset;
  };
  const auto ahead = search.ahead([&](const std::vector<size_t>& idx) {
    return std::make_pair(subset_of(idx), what_of(subset_of(idx)));
  });
  const auto r = ddmin(diffs.size(), [&](const std::vector<size_t>& idx) {
    const std::vector<std::string> subset = subset_of(idx);
    try {
      return search.verdict(subset, what_of(subset), /*fresh=*/false);
    } catch (const ScenarioError& e) {
      // Some keys only make sense together (data.source=real needs its
      // data.path): a subset without its partner is no configuration, so it
      // is undecidable, as git bisect's "skip", never the end of the search.
      if (invalid_subsets.size() < 8) invalid_subsets.push_back(what_of(subset) + ": " + one_line(e.what()));
      return probe::Verdict::kUnknown;
    }
  }, ahead);
  search.nothing_ahead();
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
  // configuration passes (the second ahead, beside the first).
  if (out.rep.per_probe == 1) {
    prober->run_ahead({{{}, "re-check: good configuration"}}, probe::Prober::Own::kNotInList,
                      probe::Prober::Fresh::kYes);
  }
  const bool minimal_fails = search.verdict(minimal, "re-check: " + what_of(minimal), /*fresh=*/true) == probe::Verdict::kFail;
  if (!minimal_fails) out.doubts.push_back("re-check: the minimal difference did not fail the same way");
  const bool good_passes = search.verdict({}, "re-check: good configuration", /*fresh=*/true) == probe::Verdict::kPass;
  if (!good_passes) out.doubts.push_back("re-check: the good configuration did not pass");
  out.confirmed = minimal_fails && good_passes;
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  conclude(out, 1.0);
  // An external worker received each difference as its own key: say which.
  std::string text;
  nlohmann::ordered_json as_passed = nlohmann::ordered_json::array();
  for (const auto& m : minimal) {
    text += (text.empty() ? "" : " + ") + std::string("`") + m + "`";
    const std::string key = m.substr(0, m.find('='));
    if (const auto written = supervisor::as_the_command_writes(bad, m)) {
      text += " (your `" + *written + "`)";
      as_passed.push_back(*written);
    }
    if (bad.worker.overrides.count(key)) {
      text += " (a key of your own configuration)";
      as_passed.push_back(m);
    }
  }
  if (!as_passed.empty()) out.result["as_passed"] = as_passed;
  out.summary = "a 1-minimal failure-inducing difference: " + text;
  return out;
}

Outputs bisect_range(probe::Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = BisectKind::kRange;
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
  const model::DecoderKind decoder = prober.load({}).model.decoder;
  out.rep = single_run(lo_probe.verdict == probe::Verdict::kFail ? lo_probe : hi_probe, 2,
                       (lo_probe.verdict == probe::Verdict::kFail) + (hi_probe.verdict == probe::Verdict::kFail), decoder);
  if (lo_probe.verdict == hi_probe.verdict || lo_probe.verdict == probe::Verdict::kUnknown ||
      hi_probe.verdict == probe::Verdict::kUnknown) {
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
  const bool fail_high = hi_probe.verdict == probe::Verdict::kFail;
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
      const probe::Verdict v = search.verdict(at(fmt(mid)), o.key + "=" + fmt(mid), /*fresh=*/false);
      if (v != probe::Verdict::kPass && v != probe::Verdict::kFail) {
        out.doubts.push_back(o.key + "=" + fmt(mid) + " could not be decided (" + to_string(v) +
                             "): the boundary lies in [" + fmt(std::min(pass, bad)) + ", " + fmt(std::max(pass, bad)) +
                             "]");
        break;
      }
      (v == probe::Verdict::kFail ? bad : pass) = mid;
    }
    pass_value = fmt(pass);
    fail_value = fmt(bad);
  }
  out.found = true;
  // Confirm both sides of the boundary with fresh probes.
  const bool pass_ok =
      search.verdict(at(pass_value), "re-check: " + o.key + "=" + pass_value, /*fresh=*/true) == probe::Verdict::kPass;
  if (!pass_ok) out.doubts.push_back("re-check: " + o.key + "=" + pass_value + " did not pass when run again");
  const bool fail_ok =
      search.verdict(at(fail_value), "re-check: " + o.key + "=" + fail_value, /*fresh=*/true) == probe::Verdict::kFail;
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

}  // namespace dbh::harness::bisect
