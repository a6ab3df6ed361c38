#include "harness/numerics/reference.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

#include "harness/common/error.h"

namespace dbh::harness::numerics {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxRuns = 64;
constexpr size_t kMaxSteps = 100000;

[[noreturn]] void bad(const std::string& file, const std::string& key, const std::string& expected,
                      const json& got) {
  std::string text = got.is_discarded() ? std::string("nothing") : got.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  throw ScenarioError(file + ": " + key + ": expected " + expected + ", got " + text);
}

double number_at(const json& j, const char* key, const std::string& file, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
    bad(file, where + "." + key, "a finite number", it == j.end() ? json(nullptr) : *it);
  }
  return it->get<double>();
}

std::optional<double> optional_number(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>())) return std::nullopt;
  return it->get<double>();
}

std::string text_at(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// One quantity's values at a step on each side.
struct Values {
  std::vector<double> reference, here;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double spread(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

// How one quantity compares: the distance between the sides' ranges and the
// noise, both relative to the reference's mean.
struct Judged {
  double by = 0, noise = 0;
  bool departs = false;
};

Judged judge(const Values& v, const Tolerance& t) {
  Judged j;
  const double scale = std::max(std::abs(mean(v.reference)), std::numeric_limits<double>::min());
  const auto [rlo, rhi] = std::minmax_element(v.reference.begin(), v.reference.end());
  const auto [hlo, hhi] = std::minmax_element(v.here.begin(), v.here.end());
  j.by = std::max({0.0, *hlo - *rhi, *rlo - *hhi}) / scale;
  j.noise = std::max(t.spread_factor * std::max(spread(v.reference), spread(v.here)) / scale, t.relative_floor);
  j.departs = j.by > j.noise;
  return j;
}

// The module numbers of `runs` at step index `i`, by module, in the first
// run's forward order.
std::vector<std::string> module_order(const std::vector<RunNumbers>& runs, size_t i) {
  std::vector<std::string> order;
  for (const auto& m : runs.front().steps[i].modules) order.push_back(m.module);
  return order;
}

const proto::ModuleNumbers* find_module(const StepNumbers& s, const std::string& name) {
  for (const auto& m : s.modules) {
    if (m.module == name) return &m;
  }
  return nullptr;
}

// Every run's value of one quantity at step index `i`; empty when a run did
// not measure it.
template <typename Get>
std::vector<double> gather(const std::vector<RunNumbers>& runs, size_t i, Get get) {
  std::vector<double> out;
  for (const auto& r : runs) {
    const std::optional<double> v = get(r.steps[i]);
    if (!v) return {};
    out.push_back(*v);
  }
  return out;
}

std::string scientific(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string significant(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

ojson to_json(const Reference& r) {
  ojson runs = ojson::array();
  for (const auto& run : r.side.runs) {
    ojson steps = ojson::array();
    for (const auto& s : run.steps) {
      ojson step = {{"step", s.step}, {"loss", s.loss}};
      if (s.grad_norm) step["grad_norm"] = *s.grad_norm;
      if (!s.modules.empty()) {
        ojson modules = ojson::array();
        for (const auto& m : s.modules) {
          ojson one = {{"module", m.module}};
          if (m.act) one["act"] = *m.act;
          if (m.grad) one["grad"] = *m.grad;
          modules.push_back(std::move(one));
        }
        step["modules"] = std::move(modules);
      }
      steps.push_back(std::move(step));
    }
    runs.push_back({{"checksum", run.checksum}, {"steps", std::move(steps)}});
  }
  return {{"format", kReferenceFormat},   {"scenario", r.scenario}, {"scenario_hash", r.scenario_hash},
          {"recorded_at", r.recorded_at}, {"machine", r.side.machine}, {"runs", std::move(runs)}};
}

Reference reference_from_json(const json& j, const std::string& file) {
  if (!j.is_object()) bad(file, "(the document)", "a numerics reference (a JSON object)", j);
  if (text_at(j, "format") != kReferenceFormat) {
    bad(file, "format", std::string("\"") + kReferenceFormat + "\" (written by dbh repeat --record)",
        j.contains("format") ? j["format"] : json(nullptr));
  }
  Reference r;
  r.scenario = text_at(j, "scenario");
  r.scenario_hash = text_at(j, "scenario_hash");
  r.recorded_at = text_at(j, "recorded_at");
  if (j.contains("machine") && j["machine"].is_object()) r.side.machine = j["machine"];
  const auto runs = j.find("runs");
  if (runs == j.end() || !runs->is_array() || runs->empty() || runs->size() > kMaxRuns) {
    bad(file, "runs", "a list of 1 to " + std::to_string(kMaxRuns) + " runs", runs == j.end() ? json(nullptr) : *runs);
  }
  for (size_t k = 0; k < runs->size(); ++k) {
    const json& run = (*runs)[k];
    const std::string where = "runs." + std::to_string(k);
    const auto steps = run.find("steps");
    if (!run.is_object() || steps == run.end() || !steps->is_array() || steps->size() > kMaxSteps) {
      bad(file, where + ".steps", "a list of at most " + std::to_string(kMaxSteps) + " steps", run);
    }
    RunNumbers rn;
    rn.checksum = text_at(run, "checksum");
    for (size_t i = 0; i < steps->size(); ++i) {
      const json& st = (*steps)[i];
      const std::string at = where + ".steps." + std::to_string(i);
      if (!st.is_object()) bad(file, at, "a step (an object)", st);
      StepNumbers sn;
      const double step = number_at(st, "step", file, at);
      if (step < 0 || step != std::floor(step)) bad(file, at + ".step", "a step index", st["step"]);
      sn.step = static_cast<int64_t>(step);
      sn.loss = number_at(st, "loss", file, at);
      sn.grad_norm = optional_number(st, "grad_norm");
      if (const auto m = st.find("modules"); m != st.end() && m->is_array()) {
        for (const auto& one : *m) {
          if (sn.modules.size() >= proto::kMaxNumericsModules) break;
          if (!one.is_object() || text_at(one, "module").empty()) continue;
          sn.modules.push_back({text_at(one, "module").substr(0, proto::kMaxModuleNameBytes),
                                optional_number(one, "act"), optional_number(one, "grad")});
        }
      }
      rn.steps.push_back(std::move(sn));
    }
    r.side.runs.push_back(std::move(rn));
  }
  return r;
}

json machine_of(const supervisor::TrialAnalysis& a) {
  json m = json::object();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) m["host"] = host;
  {
    std::ifstream cpu("/proc/cpuinfo");
    for (std::string line; std::getline(cpu, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const auto colon = line.find(':');
      if (colon != std::string::npos) m["cpu"] = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  m["cores"] = std::thread::hardware_concurrency();
  json gpus = json::array();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream in(e.path() / "information");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Model:", 0) == 0) gpus.push_back(line.substr(line.find_first_not_of(" \t", 6)));
    }
  }
  if (!gpus.empty()) m["gpus"] = gpus;
  for (const char* var : {"ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) m[var] = std::string(v).substr(0, 64);
  }
  m["worker"] = a.worker.empty() ? json("dbh") : json(a.worker);
  m["ran_with"] = a.worker_facts;
  if (a.worker_environment.is_object() && !a.worker_environment.empty()) m["environment"] = a.worker_environment;
  return m;
}

Side side_of(const std::vector<const supervisor::TrialAnalysis*>& trials, json machine) {
  Side side;
  side.machine = std::move(machine);
  for (const supervisor::TrialAnalysis* a : trials) {
    RunNumbers run;
    for (const auto& s : a->steps) {
      if (s.run != 0) continue;
      run.steps.push_back({s.step, s.loss, s.grad_norm, s.modules});
    }
    if (!a->run_checksums.empty()) run.checksum = a->run_checksums.front();
    side.runs.push_back(std::move(run));
  }
  return side;
}

Comparison compare(const Side& reference, const Side& here, const Tolerance& t) {
  Comparison c;
  c.reference_runs = static_cast<int64_t>(reference.runs.size());
  c.here_runs = static_cast<int64_t>(here.runs.size());
  if (reference.runs.empty() || here.runs.empty()) {
    c.notes.push_back(reference.runs.empty() ? "the reference holds no run" : "nothing ran here");
    return c;
  }
  // The steps every run of both sides trained, in order and the same.
  size_t n = std::numeric_limits<size_t>::max();
  for (const auto* side : {&reference, &here}) {
    for (const auto& r : side->runs) n = std::min(n, r.steps.size());
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t step = reference.runs.front().steps[i].step;
    bool aligned = true;
    for (const auto* side : {&reference, &here}) {
      for (const auto& r : side->runs) aligned = aligned && r.steps[i].step == step;
    }
    if (!aligned) {
      c.notes.push_back("the sides' steps differ from step index " + std::to_string(i) + " on: compared up to it");
      n = i;
      break;
    }
  }
  size_t longest = 0;
  for (const auto* side : {&reference, &here}) {
    for (const auto& r : side->runs) longest = std::max(longest, r.steps.size());
  }
  if (longest > n) {
    c.notes.push_back("compared the " + std::to_string(n) + " step(s) every run of both sides trained (the longest ran " +
                      std::to_string(longest) + ")");
  }
  c.steps = static_cast<int64_t>(n);
  const auto has_modules = [&](const Side& s) {
    return n > 0 && std::all_of(s.runs.begin(), s.runs.end(), [](const RunNumbers& r) { return !r.steps.front().modules.empty(); });
  };
  c.modules_compared = has_modules(reference) && has_modules(here);
  if (!c.modules_compared && n > 0) {
    c.notes.push_back(std::string(has_modules(reference) ? "this side" : "the reference") +
                      " measured no module numbers (monitors.numerics): the loss and the gradient norm were compared");
  }
  const auto consider = [&](size_t i, const std::string& quantity, const std::string& module, const Values& v) {
    if (v.reference.empty() || v.here.empty() || c.departure) return;
    const Judged j = judge(v, t);
    c.largest_noise = std::max(c.largest_noise, j.noise);
    const double ratio = j.by / j.noise;
    if (ratio > c.closest || c.closest_at.empty()) {
      c.closest = ratio;
      c.closest_at = "step " + std::to_string(reference.runs.front().steps[i].step) + ", " + quantity;
    }
    if (j.departs) {
      c.departure = Departure{reference.runs.front().steps[i].step, quantity, module, mean(v.reference), mean(v.here),
                              j.by, j.noise};
    }
  };
  for (size_t i = 0; i < n && !c.departure; ++i) {
    const std::vector<std::string> order = c.modules_compared ? module_order(reference.runs, i) : std::vector<std::string>{};
    const auto module_values = [&](const std::string& m, bool act) {
      const auto get = [&](const StepNumbers& s) -> std::optional<double> {
        const auto* found = find_module(s, m);
        return found == nullptr ? std::nullopt : (act ? found->act : found->grad);
      };
      return Values{gather(reference.runs, i, get), gather(here.runs, i, get)};
    };
    for (const auto& m : order) consider(i, "output of " + m, m, module_values(m, true));
    const auto loss = [](const StepNumbers& s) -> std::optional<double> { return s.loss; };
    const Values losses{gather(reference.runs, i, loss), gather(here.runs, i, loss)};
    consider(i, "loss", "", losses);
    for (auto it = order.rbegin(); it != order.rend(); ++it) consider(i, "gradient of " + *it, *it, module_values(*it, false));
    const auto norm = [](const StepNumbers& s) { return s.grad_norm; };
    consider(i, "gradient norm", "", Values{gather(reference.runs, i, norm), gather(here.runs, i, norm)});
    // The loss plot: each side's range and the band the other may lie in.
    const Judged j = judge(losses, t);
    if (j.noise > kMaxLossNoise && c.undecided.empty()) {
      c.undecided = "at step " + std::to_string(reference.runs.front().steps[i].step) + " the loss's noise is " +
                    scientific(j.noise) + " of the loss itself: the repeats of a side disagree too much for a "
                    "comparison to say anything";
    }
    const double m = mean(losses.reference), half = j.noise * std::abs(m);
    const auto [rlo, rhi] = std::minmax_element(losses.reference.begin(), losses.reference.end());
    const auto [hlo, hhi] = std::minmax_element(losses.here.begin(), losses.here.end());
    c.loss.push_back({reference.runs.front().steps[i].step, *rlo, *rhi, *hlo, *hhi, *rlo - half, *rhi + half});
    if (!c.undecided.empty()) break;  // nothing after a step that decides nothing is compared
  }
  if (n == 0) c.notes.push_back("no step was trained on both sides");
  return c;
}

std::string verdict_line(const Comparison& c) {
  const std::string runs = std::to_string(c.reference_runs) + " reference and " + std::to_string(c.here_runs) +
                           " run(s) here";
  if (c.steps == 0) return "not compared: " + (c.notes.empty() ? std::string("no steps") : c.notes.front());
  if (!c.undecided.empty() && !c.departure) return "not decided: " + c.undecided + " (" + runs + ")";
  if (!c.departure) {
    return "the same within the noise: " + std::to_string(c.steps) + " step(s) of " + runs + ", " +
           (c.modules_compared ? "every module's output and gradient, " : "") +
           "the loss and the gradient norm; the closest came to " + significant(100 * c.closest) +
           " % of the noise (" + c.closest_at + ")";
  }
  const Departure& d = *c.departure;
  return "departs at step " + std::to_string(d.step) + ", first in the " + d.quantity + ": " + significant(d.here) +
         " here against " + significant(d.reference) + " in the reference, by " + scientific(d.by) +
         " (relative) where the noise is " + scientific(d.noise) + " (" + runs + ")";
}

}  // namespace dbh::harness::numerics
