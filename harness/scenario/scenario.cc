#include "harness/scenario/scenario.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "harness/common/error.h"
#include "harness/common/hash.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c != ' ' && c != '_') s.push_back(c);
  }
  if (s.empty()) return std::nullopt;
  size_t pos = 0;
  double number = 0;
  try {
    number = std::stod(s, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // Decimal only: stod also reads hexadecimal ("0x10" is 16, "0x1p30" a GiB).
  if (s.find_first_of("xX") < pos) return std::nullopt;
  const std::string unit = s.substr(pos);
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
  for (const auto& [u, mult] : kUnits) {
    if (unit == u) {
      const double bytes = number * mult;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 9.2e18) return std::nullopt;
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return std::nullopt;
}

const std::vector<std::string>& data_source_names() {
  static const std::vector<std::string> names = {"real", "synthetic_random", "synthetic_boxes", "synthetic_render"};
  return names;
}

const std::string& to_string(DataSource source) { return data_source_names().at(static_cast<size_t>(source)); }

const std::vector<std::string>& numerics_variant_names() {
  static const std::vector<std::string> names = {"as_is", "one_thread", "instruction_set", "cudnn_algorithms",
                                                 "by_process"};
  return names;
}

const std::string& to_string(NumericsVariant v) { return numerics_variant_names().at(static_cast<size_t>(v)); }

const std::vector<std::string>& outcome_names() {
  static const std::vector<std::string> names = {"passed",   "failed",           "crashed", "timed_out", "hung",
                                                 "diverged", "nondeterministic", "leaked",  "skipped",   "unresolved"};
  return names;
}

const std::string& to_string(Outcome o) {
  return outcome_names().at(static_cast<size_t>(o));
}

std::optional<Outcome> outcome_from_string(const std::string& s) {
  const auto& names = outcome_names();
  const auto it = std::find(names.begin(), names.end(), s);
  if (it == names.end()) return std::nullopt;
  return static_cast<Outcome>(it - names.begin());
}

const std::vector<std::string>& train_mode_names() {
  static const std::vector<std::string> names = {"train", "ops"};
  return names;
}

const std::string& to_string(TrainMode mode) {
  return train_mode_names().at(static_cast<size_t>(mode));
}

const std::vector<std::string>& command_syntax_names() {
  static const std::vector<std::string> names = {"key_value", "flags", "option", "file"};
  return names;
}

const std::string& to_string(CommandSyntax syntax) {
  return command_syntax_names().at(static_cast<size_t>(syntax));
}

const std::vector<std::string>& monitor_mode_names() {
  static const std::vector<std::string> names = {"cheap", "localise", "off"};
  return names;
}

const std::string& to_string(MonitorMode mode) {
  return monitor_mode_names().at(static_cast<size_t>(mode));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(u == 0 ? 0 : 1);
  s << v << " " << units[u];
  return s.str();
}

std::vector<std::string> known_failure_classes() {
  std::vector<std::string> out;
  for (const auto& c : kb::KnowledgeBase::shipped().classes()) out.push_back(c.id);
  if (!out.empty()) out.push_back("exception");  // an error no signature matches
  return out;
}

namespace {

// The value of fault parameter `key` as T, or T{} when the fault does not set
// it; a parameter of another type is a logic_error naming both.
// A parameter name the fault's catalog entry does not declare is a mistake
// in dbh's code (a misspelt "factr" would read as 0), never a value.
void check_declared(const FaultConfig& f, const std::string& key) {
  const FaultSpec* spec = find_fault(f.name);
  if (spec == nullptr) return;  // a fault the catalog does not know was refused when decoded
  for (const auto& p : spec->params) {
    if (p.name == key) return;
  }
  throw std::logic_error("fault " + f.name + ": parameter " + key + " is not declared in its catalog entry");
}

template <typename T>
T typed_param(const FaultConfig& f, const std::string& key) {
  check_declared(f, key);
  const auto it = f.params.find(key);
  if (it == f.params.end()) return T{};
  if (const T* v = std::get_if<T>(&it->second.value)) return *v;
  throw std::logic_error("fault " + f.name + ": parameter " + key + " (\"" + it->second.text +
                         "\") read as another type than its catalog entry's");
}

}  // namespace

int64_t FaultConfig::get_int(const std::string& key) const {
  return typed_param<int64_t>(*this, key);
}
double FaultConfig::get_double(const std::string& key) const {
  return typed_param<double>(*this, key);
}
bool FaultConfig::get_bool(const std::string& key) const {
  return typed_param<bool>(*this, key);
}
const std::string& FaultConfig::get(const std::string& key) const {
  static const std::string kEmpty;
  check_declared(*this, key);
  const auto it = params.find(key);
  return it == params.end() ? kEmpty : it->second.text;
}
const std::string& FaultConfig::module() const {
  static const std::string kEmpty;
  const auto it = params.find("module");
  return it == params.end() ? kEmpty : it->second.text;
}
bool FaultConfig::fires_at(int64_t step, int64_t run_index) const {
  return step >= at_step && step <= until_step && (run < 0 || run == run_index);
}

std::vector<std::string> input_paths(const Scenario& s) {
  std::vector<std::string> out = s.files;
  for (const std::string* p : {&s.data.path, &s.data.val.path, &s.model.weights, &s.train.resume_from}) {
    if (!p->empty()) out.push_back(*p);
  }
  return out;
}

bool is_slurm_time(const std::string& text) {
  static const std::regex kForms(
      R"((\d+)|(\d+:\d{1,2})|(\d+:\d{1,2}:\d{1,2})|(\d+-\d+)|(\d+-\d+:\d{1,2})|(\d+-\d+:\d{1,2}:\d{1,2}))");
  return text == "UNLIMITED" || text == "infinite" || std::regex_match(text, kForms);
}

bool is_slurm_name(const std::string& text) { return text.find_first_of(" \t\n,:=") == std::string::npos; }

std::vector<std::string> dataset_folders(const Scenario& s) {
  std::vector<std::string> out;
  for (const std::string* p : {&s.data.path, &s.data.val.path}) {
    if (!p->empty()) out.push_back(*p);
  }
  return out;
}

std::string resolved_json(const Scenario& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["description"] = s.description;
  j["model"] = section_json("model", s);
  j["data"] = section_json("data", s);
  j["train"] = section_json("train", s);
  j["hardware"] = section_json("hardware", s);
  j["monitors"] = section_json("monitors", s);
  j["faults"] = nlohmann::ordered_json::array();
  for (const auto& f : s.faults) {
    nlohmann::ordered_json fj;
    fj["name"] = f.name;
    fj["at_step"] = f.at_step;
    fj["until_step"] = f.until_step;
    fj["run"] = f.run;
    for (const auto& [k, v] : f.params)
      fj[k] = v.text;
    j["faults"].push_back(fj);
  }
  j["repeat"] = section_json("repeat", s);
  j["limits"] = section_json("limits", s);
  // Only an external worker writes its section: the built-in worker's
  // resolved scenarios (and their hashes) stay as they were.
  if (s.worker.external()) j["worker"] = section_json("worker", s);
  // Likewise a scenario that names no cluster keeps its hash.
  if (!s.cluster.partition.empty() || !s.cluster.gpu_type.empty() || !s.cluster.time_limit.empty()) {
    j["cluster"] = section_json("cluster", s);
  }
  nlohmann::ordered_json e;
  e["outcome"] = to_string(s.expect.outcome);
  if (s.expect.failure_class) e["failure_class"] = *s.expect.failure_class;
  if (s.expect.step) e["step"] = *s.expect.step;
  if (s.expect.module) e["module"] = *s.expect.module;
  if (s.expect.deterministic) e["deterministic"] = *s.expect.deterministic;
  if (s.expect.max_peak_memory) e["max_peak_memory"] = std::to_string(*s.expect.max_peak_memory);
  if (s.expect.data_dependent) e["data_dependent"] = *s.expect.data_dependent;
  if (s.expect.min_hmean) e["min_hmean"] = *s.expect.min_hmean;
  if (s.expect.loss_drop) e["loss_drop"] = *s.expect.loss_drop;
  j["expect"] = e;
  j["controls"] = s.controls;
  // Scenario text may hold invalid UTF-8; replace it rather than throw.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string scenario_hash(const Scenario& s) {
  return Fnv1a64().update(resolved_json(s)).hex();
}

}  // namespace dbh::harness::scenario
