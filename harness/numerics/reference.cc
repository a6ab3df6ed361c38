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
#include "harness/common/text.h"

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

// `one_step` is the relative spread of one step from the same state the
// reference measured for the quantity (0: none measured).
Judged judge(const Values& v, const Tolerance& t, double one_step = 0) {
  Judged j;
  const double scale = std::max(std::abs(mean(v.reference)), std::numeric_limits<double>::min());
  const auto [rlo, rhi] = std::minmax_element(v.reference.begin(), v.reference.end());
  const auto [hlo, hhi] = std::minmax_element(v.here.begin(), v.here.end());
  j.by = std::max({0.0, *hlo - *rhi, *rlo - *hhi}) / scale;
  j.noise = std::max({t.spread_factor * std::max(spread(v.reference), spread(v.here)) / scale,
                      t.spread_factor * one_step, t.relative_floor});
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
    ojson one = {{"checksum", run.checksum}};
    if (!run.variant.empty()) one["variant"] = run.variant;
    if (run.channels_last) one["channels_last"] = *run.channels_last;
    one["steps"] = std::move(steps);
    runs.push_back(std::move(one));
  }
  ojson j = {{"format", kReferenceFormat},   {"scenario", r.scenario}, {"scenario_hash", r.scenario_hash},
             {"recorded_at", r.recorded_at}, {"machine", r.side.machine}};
  if (!r.state_steps.empty()) j["state_steps"] = r.state_steps;
  j["runs"] = std::move(runs);
  return j;
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
  if (const auto st = j.find("state_steps"); st != j.end()) {
    if (!st->is_array() || st->size() > kMaxSteps) bad(file, "state_steps", "a list of step indices", *st);
    for (size_t i = 0; i < st->size(); ++i) {
      const json& k = (*st)[i];
      if (!k.is_number_integer() || k.get<int64_t>() < 0) {
        bad(file, "state_steps." + std::to_string(i), "a step index", k);
      }
      r.state_steps.push_back(k.get<int64_t>());
    }
  }
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
    rn.variant = text_at(run, "variant").substr(0, 200);
    if (const auto layout = run.find("channels_last"); layout != run.end()) {
      if (!layout->is_boolean()) bad(file, where + ".channels_last", "true or false", *layout);
      rn.channels_last = layout->get<bool>();
    }
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

std::vector<RunNumbers> runs_of(const std::vector<const supervisor::TrialAnalysis*>& trials,
                                const scenario::Scenario& s) {
  std::vector<RunNumbers> runs;
  for (const supervisor::TrialAnalysis* a : trials) {
    RunNumbers run;
    for (const auto& s : a->steps) {
      if (s.run != 0) continue;
      run.steps.push_back({s.step, s.loss, s.grad_norm, s.modules});
    }
    if (!a->run_checksums.empty()) run.checksum = a->run_checksums.front();
    run.variant = a->numerics_variant;
    // Note [The layout, held to the reference's]: what the trial ran with,
    // measured, cached or set (dbh's own worker only).
    if (!s.worker.external()) run.channels_last = s.train.channels_last;
    if (const json& t = a->tuning; t.is_object() && t.contains("channels_last") && t["channels_last"].is_object()) {
      if (const auto v = t["channels_last"].find("value"); v != t["channels_last"].end() && v->is_boolean()) {
        run.channels_last = v->get<bool>();
      }
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

Tolerance tolerance_for(model::Precision precision) {
  Tolerance t;
  const double unit_roundoff = precision == model::Precision::kBf16   ? std::ldexp(1.0, -8)
                               : precision == model::Precision::kFp16 ? std::ldexp(1.0, -11)
                                                                      : std::ldexp(1.0, -24);
  t.relative_floor = std::max(t.relative_floor, unit_roundoff);
  return t;
}

namespace {

// The number of leading steps that every run of `groups` trained, at the
// same step indices; notes where they part.
size_t common_steps(const std::vector<const std::vector<RunNumbers>*>& groups, std::vector<std::string>& notes,
                    const std::string& what) {
  size_t n = std::numeric_limits<size_t>::max(), longest = 0;
  const RunNumbers* first = nullptr;
  for (const auto* g : groups) {
    for (const auto& r : *g) {
      n = std::min(n, r.steps.size());
      longest = std::max(longest, r.steps.size());
      if (first == nullptr) first = &r;
    }
  }
  if (first == nullptr) return 0;
  for (size_t i = 0; i < n; ++i) {
    bool aligned = true;
    for (const auto* g : groups) {
      for (const auto& r : *g) aligned = aligned && r.steps[i].step == first->steps[i].step;
    }
    if (!aligned) {
      notes.push_back(what + ": the steps differ from step index " + std::to_string(i) + " on: compared up to it");
      return i;
    }
  }
  if (longest > n) {
    notes.push_back(what + ": compared the " + std::to_string(n) + " step(s) every run trained (the longest ran " +
                    std::to_string(longest) + ")");
  }
  return n;
}

bool has_modules(const std::vector<RunNumbers>& runs) {
  return std::all_of(runs.begin(), runs.end(),
                     [](const RunNumbers& r) { return !r.steps.empty() && !r.steps.front().modules.empty(); });
}

// Each quantity of step index `i`, in the order the step computes it (Note
// [The same state, step by step]): each module's output in forward order,
// the loss, each module's gradient in backward order, the gradient norm;
// the loss alone when `loss_only`, no module when not `modules`.
template <typename Visit>
void each_quantity(const std::vector<RunNumbers>& ref, const std::vector<RunNumbers>& here, size_t i, bool modules,
                   bool loss_only, Visit visit) {
  const std::vector<std::string> order = modules && !loss_only ? module_order(ref, i) : std::vector<std::string>{};
  const auto module_values = [&](const std::string& m, bool act) {
    const auto get = [&](const StepNumbers& s) -> std::optional<double> {
      const auto* found = find_module(s, m);
      return found == nullptr ? std::nullopt : (act ? found->act : found->grad);
    };
    return Values{gather(ref, i, get), gather(here, i, get)};
  };
  for (const auto& m : order) visit("output of " + m, m, module_values(m, true));
  const auto loss = [](const StepNumbers& s) -> std::optional<double> { return s.loss; };
  visit("loss", "", Values{gather(ref, i, loss), gather(here, i, loss)});
  if (loss_only) return;
  for (auto it = order.rbegin(); it != order.rend(); ++it) visit("gradient of " + *it, *it, module_values(*it, false));
  const auto norm = [](const StepNumbers& s) { return s.grad_norm; };
  visit("gradient norm", "", Values{gather(ref, i, norm), gather(here, i, norm)});
}

// Relative spread by quantity: the noise of one step from the same state.
using OneStepNoise = std::map<std::string, double>;

// `noise`'s value for `quantity`; 0 where nothing was measured.
double one_step_of(const OneStepNoise& noise, const std::string& quantity) {
  const auto it = noise.find(quantity);
  return it == noise.end() ? 0 : it->second;
}

// What the reference's own processes measured of one step from the same
// state: at their first step every process starts from the same
// parameters, so their spread there is the reference machine's noise of
// one step, which a nondeterministic kernel widens. Empty with one process.
OneStepNoise one_step_noise(const std::vector<RunNumbers>& ref, bool modules) {
  OneStepNoise noise;
  if (ref.size() < 2 || std::any_of(ref.begin(), ref.end(), [&](const RunNumbers& r) {
        return r.steps.empty() || r.steps.front().step != ref.front().steps.front().step;
      })) {
    return noise;
  }
  each_quantity(ref, ref, 0, modules, false, [&](const std::string& quantity, const std::string&, const Values& v) {
    if (v.reference.empty()) return;
    const double scale = std::max(std::abs(mean(v.reference)), std::numeric_limits<double>::min());
    noise[quantity] = spread(v.reference) / scale;
  });
  return noise;
}

// One walk over steps [0, n) of `ref` against `here`, each step's
// quantities in the order the step computes them; stops at the first that
// departs.
struct Walk {
  std::optional<Departure> departure;
  double closest = 0;
  std::string closest_at;
  double largest_noise = 0;
};

Walk walk(const std::vector<RunNumbers>& ref, const std::vector<RunNumbers>& here, size_t n, bool modules,
          bool loss_only, bool same_state, const OneStepNoise& one_step, const Tolerance& t) {
  Walk w;
  for (size_t i = 0; i < n && !w.departure; ++i) {
    each_quantity(ref, here, i, modules, loss_only,
                  [&](const std::string& quantity, const std::string& module, const Values& v) {
                    if (v.reference.empty() || v.here.empty() || w.departure) return;
                    const Judged j = judge(v, t, one_step_of(one_step, quantity));
                    w.largest_noise = std::max(w.largest_noise, j.noise);
                    const std::string at = "step " + std::to_string(ref.front().steps[i].step) + ", " + quantity;
                    if (j.by / j.noise > w.closest || w.closest_at.empty()) {
                      w.closest = j.by / j.noise;
                      w.closest_at = at + (same_state ? " (from the same state)" : "");
                    }
                    if (j.departs) {
                      w.departure = Departure{ref.front().steps[i].step, quantity, module, mean(v.reference),
                                              mean(v.here), j.by, j.noise, same_state};
                    }
                  });
  }
  return w;
}

}  // namespace

Comparison compare(const Side& reference, const Side& here, const Tolerance& t) {
  Comparison c;
  c.tolerance = t;
  c.reference_runs = static_cast<int64_t>(reference.runs.size());
  c.here_runs = static_cast<int64_t>(here.runs.size());
  c.replays = static_cast<int64_t>(here.replays.size());
  if (reference.runs.empty() || here.runs.empty()) {
    c.notes.push_back(reference.runs.empty() ? "the reference holds no run" : "nothing ran here");
    return c;
  }
  const size_t n = common_steps({&reference.runs, &here.runs}, c.notes, "the free runs");
  c.steps = static_cast<int64_t>(n);
  c.modules_compared = n > 0 && has_modules(reference.runs) && has_modules(here.runs);
  if (!c.modules_compared && n > 0) {
    c.notes.push_back(std::string(has_modules(reference.runs) ? "this side" : "the reference") +
                      " measured no module numbers (monitors.numerics): the loss and the gradient norm were compared");
  }
  // Note [The same state, step by step]: the reference's first process
  // against the processes here that started every step from its states.
  const OneStepNoise one_step = one_step_noise(reference.runs, c.modules_compared);
  Walk same;
  const std::vector<RunNumbers> first = {reference.runs.front()};
  if (!here.replays.empty()) {
    const size_t m = common_steps({&first, &here.replays}, c.notes, "the steps from the same state");
    c.steps_from_same_state = static_cast<int64_t>(m);
    same = walk(first, here.replays, m, c.modules_compared && has_modules(here.replays), false, true, one_step, t);
  }
  // The free trajectories: on the loss where the steps were compared from
  // the same state, else on every quantity.
  const Walk trajectory =
      walk(reference.runs, here.runs, n, c.modules_compared, c.steps_from_same_state > 0, false, one_step, t);
  c.departure = same.departure;
  if (trajectory.departure && (!c.departure || trajectory.departure->step < c.departure->step)) {
    c.departure = trajectory.departure;
  }
  for (const Walk* w : std::initializer_list<const Walk*>{&same, &trajectory}) {
    c.largest_noise = std::max(c.largest_noise, w->largest_noise);
    if (!w->closest_at.empty() && (w->closest > c.closest || c.closest_at.empty())) {
      c.closest = w->closest;
      c.closest_at = w->closest_at;
    }
  }
  // The loss plot: each side's range and the band the other may lie in.
  for (size_t i = 0; i < n; ++i) {
    const auto loss = [](const StepNumbers& s) -> std::optional<double> { return s.loss; };
    const Values losses{gather(reference.runs, i, loss), gather(here.runs, i, loss)};
    const Judged j = judge(losses, t, one_step_of(one_step, "loss"));
    const int64_t step = reference.runs.front().steps[i].step;
    if (j.noise > kMaxLossNoise && c.undecided.empty() && c.steps_from_same_state == 0 &&
        (!c.departure || c.departure->step > step)) {
      c.undecided = "at step " + std::to_string(step) + " the loss's noise is " + scientific(j.noise) +
                    " of the loss itself: the repeats of a side disagree too much for a comparison to say anything";
    }
    const double m = mean(losses.reference), half = j.noise * std::abs(m);
    const auto [rlo, rhi] = std::minmax_element(losses.reference.begin(), losses.reference.end());
    const auto [hlo, hhi] = std::minmax_element(losses.here.begin(), losses.here.end());
    c.loss.push_back({step, *rlo, *rhi, *hlo, *hhi, *rlo - half, *rhi + half});
  }
  if (!c.undecided.empty()) c.departure.reset();  // nothing after a step that decides nothing is compared
  if (n == 0) c.notes.push_back("no step was trained on both sides");
  return c;
}

std::string verdict_line(const Comparison& c) {
  const std::string runs = std::to_string(c.reference_runs) + " reference and " + std::to_string(c.here_runs) +
                           " run(s) here" +
                           (c.replays > 0 ? " and " + std::to_string(c.replays) + " from the reference's states" : "");
  if (c.steps == 0) return "not compared: " + (c.notes.empty() ? std::string("no steps") : c.notes.front());
  if (!c.undecided.empty() && !c.departure) return "not decided: " + c.undecided + " (" + runs + ")";
  if (!c.departure) {
    const std::string what = (c.modules_compared ? "every module's output and gradient, " : std::string()) +
                             "the loss and the gradient norm";
    return "the same within the noise: " +
           (c.steps_from_same_state > 0
                ? std::to_string(c.steps_from_same_state) + " step(s) each from the same state (" + what +
                      ") and the free runs' loss over " + std::to_string(c.steps) + " step(s)"
                : std::to_string(c.steps) + " step(s), " + what) +
           " (" + runs + "); the closest came to " + significant(100 * c.closest) + " % of the noise (" +
           c.closest_at + ")";
  }
  const Departure& d = *c.departure;
  const std::string how =
      d.same_state ? " (from the same state)"
                   : c.steps_from_same_state > d.step
                         ? " (the free runs part; every step from the same state computes alike: the parameters' "
                           "updates differ)"
                         : "";
  return "departs at step " + std::to_string(d.step) + ", first in the " + d.quantity + how + ": " +
         significant(d.here) + " here against " + significant(d.reference) + " in the reference, by " +
         scientific(d.by) + " (relative) where the noise is " + scientific(d.noise) + " (" + runs + ")";
}

std::optional<bool> layout_to_hold(const Reference& reference, bool layout_auto_here) {
  if (!layout_auto_here || reference.side.runs.empty()) return std::nullopt;
  return reference.side.runs.front().channels_last;
}

}  // namespace dbh::harness::numerics
