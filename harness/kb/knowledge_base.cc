#include "harness/kb/knowledge_base.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/json_fields.h"
#include "harness/common/value.h"

namespace dbh::harness::kb {

namespace {
std::vector<std::string> strings(const Value* v, const std::string& where) {
  std::vector<std::string> out;
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_seq()) throw ScenarioError(v->loc.str() + ": " + where + ": expected a list, got " + v->describe());
  for (const auto& x : v->seq) {
    if (!x.is_scalar()) throw ScenarioError(x.loc.str() + ": " + where + ": expected a string, got " + x.describe());
    out.push_back(x.scalar);
  }
  return out;
}
}  // namespace

namespace {

// Note [Resolutions that are tried]: a knowledge-base resolution that dbh can
// express as overrides (reports/kb/failures.yaml, `verify:`) is applied to
// the scenario and run as a control; it is *confirmed* when that run passes
// and *refuted* when it still fails. `{key/N}` and `{key*N}` are computed from
// the scenario's resolved value of `key` (an integer stays one, at least 1; a
// real value is scaled, e.g. a tenth of train.lr), and
// `faults[name=NAME].param=value` addresses the first fault named NAME (the
// user's setup a planted fault stands for, e.g. the binarization's dtype).
// Returns nullopt when the key has no numeric value or no such fault exists.
std::optional<std::string> computed_override(std::string kv, const nlohmann::json& resolved) {
  const std::string selector = "faults[name=";
  if (kv.rfind(selector, 0) == 0) {
    const auto close = kv.find(']');
    if (close == std::string::npos) return std::nullopt;
    const std::string name = kv.substr(selector.size(), close - selector.size());
    const auto faults = resolved.find("faults");
    if (faults == resolved.end() || !faults->is_array()) return std::nullopt;
    size_t index = 0;
    while (index < faults->size() && field_or((*faults)[index], "name", "") != name) ++index;
    if (index == faults->size()) return std::nullopt;
    kv = "faults." + std::to_string(index) + kv.substr(close + 1);
  }
  const auto eq = kv.find('=');
  if (eq == std::string::npos) return kv;
  const std::string value = kv.substr(eq + 1);
  if (value.size() < 5 || value.front() != '{' || value.back() != '}') return kv;
  const std::string expr = value.substr(1, value.size() - 2);
  const auto op = expr.find_first_of("*/");
  if (op == std::string::npos) return std::nullopt;
  const nlohmann::json* node = &resolved;
  std::istringstream path(expr.substr(0, op));
  for (std::string part; std::getline(path, part, '.');) {
    if (!node->is_object() || !node->contains(part)) return std::nullopt;
    node = &(*node)[part];
  }
  const int64_t n = std::strtoll(expr.c_str() + op + 1, nullptr, 10);
  if (n < 1) return std::nullopt;
  if (node->is_number_float()) {
    // A real value (a learning rate): scaled, in as few digits as tell it.
    const double x = node->get<double>();
    std::ostringstream y;
    y << std::setprecision(6) << (expr[op] == '*' ? x * static_cast<double>(n) : x / static_cast<double>(n));
    return kv.substr(0, eq + 1) + y.str();
  }
  if (!node->is_number_integer()) return std::nullopt;
  const int64_t x = node->get<int64_t>();
  const int64_t y = expr[op] == '*' ? x * n : std::max<int64_t>(1, x / n);
  return kv.substr(0, eq + 1) + std::to_string(y);
}

// The resolved value of `key` as an override would write it ("" when absent).
std::string resolved_value(const std::string& key, const nlohmann::json& resolved) {
  const nlohmann::json* node = &resolved;
  std::istringstream path(key);
  for (std::string part; std::getline(path, part, '.');) {
    if (node->is_array() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
        part.size() < 10 && std::stoul(part) < node->size()) {
      node = &(*node)[std::stoul(part)];
      continue;
    }
    if (!node->is_object() || !node->contains(part)) return {};
    node = &(*node)[part];
  }
  return node->is_string() ? node->get<std::string>() : node->dump();
}

}  // namespace

std::optional<std::vector<std::string>> check_overrides(const FailureClass::Check& check, const nlohmann::json& resolved,
                                                        bool* changes, std::string* why_not) {
  std::vector<std::string> out;
  bool differs = false;
  // Note [Resolutions that cannot tell here]: a resolution that changes only
  // CUDA/cuDNN settings answers nothing on the CPU (a probe there would
  // "refute" or "confirm" it by a run that never used them), and one that
  // changes only an injected fault's own parameters switches the fault off
  // rather than fixing anything: neither is tried.
  const bool on_cpu = resolved.contains("hardware") && field_or(resolved["hardware"], "device", "cpu") == "cpu";
  bool device_only = !check.overrides.empty(), fault_only = !check.overrides.empty();
  for (const auto& kv : check.overrides) {
    const std::string key = kv.substr(0, kv.find('='));
    device_only = device_only && (key.rfind("hardware.cudnn_", 0) == 0 || key == "hardware.allow_tf32" ||
                                  key == "hardware.launch_blocking");
    fault_only = fault_only && key.rfind("faults", 0) == 0;
  }
  if ((on_cpu && device_only) || fault_only) {
    if (why_not != nullptr) {
      *why_not = fault_only ? "it changes only the injected fault's own parameters, which switches the fault off "
                              "rather than fixing anything"
                            : "it changes only CUDA/cuDNN settings, which a run on the CPU never uses: run it on a GPU";
    }
    return std::nullopt;
  }
  for (const auto& kv : check.overrides) {
    const auto applied = computed_override(kv, resolved);
    if (!applied) return std::nullopt;
    const auto eq = applied->find('=');
    differs = differs || eq == std::string::npos ||
              resolved_value(applied->substr(0, eq), resolved) != applied->substr(eq + 1);
    out.push_back(*applied);
  }
  if (changes != nullptr) *changes = differs;
  return out;
}

KnowledgeBase KnowledgeBase::load(const std::string& path) {
  const Value root = load_yaml_file(path);
  if (!root.is_seq()) throw ScenarioError(root.loc.str() + ": expected a list of failure classes, got " + root.describe());
  KnowledgeBase kb;
  for (const auto& item : root.seq) {
    if (!item.is_map()) throw ScenarioError(item.loc.str() + ": expected a map, got " + item.describe());
    FailureClass c;
    const Value* id = item.find("class");
    if (id == nullptr || !id->is_scalar()) throw ScenarioError(item.loc.str() + ": class: expected a name, got none");
    c.id = id->scalar;
    if (const Value* t = item.find("title"); t != nullptr && t->is_scalar()) c.title = t->scalar;
    c.signatures = strings(item.find("signatures"), c.id + ".signatures");
    c.under_host_budget = strings(item.find("under_host_budget"), c.id + ".under_host_budget");
    c.events = strings(item.find("events"), c.id + ".events");
    c.causes = strings(item.find("causes"), c.id + ".causes");
    c.resolutions = strings(item.find("resolutions"), c.id + ".resolutions");
    if (const Value* v = item.find("silent"); v != nullptr) {
      if (!v->is_scalar() || (v->scalar != "true" && v->scalar != "false")) {
        throw ScenarioError(v->loc.str() + ": " + c.id + ".silent: expected true or false, got " + v->describe());
      }
      c.silent = v->scalar == "true";
    }
    if (const Value* v = item.find("verify"); v != nullptr) {
      if (!v->is_seq()) throw ScenarioError(v->loc.str() + ": " + c.id + ".verify: expected a list, got " + v->describe());
      for (const auto& e : v->seq) {
        const Value* r = e.is_map() ? e.find("resolution") : nullptr;
        long n = 0;
        if (r == nullptr || !r->is_scalar() || (n = std::strtol(r->scalar.c_str(), nullptr, 10)) < 1 ||
            static_cast<size_t>(n) > c.resolutions.size()) {
          throw ScenarioError(e.loc.str() + ": " + c.id + ".verify: expected {resolution: 1.." +
                              std::to_string(c.resolutions.size()) + ", overrides: [...]}, got " + e.describe());
        }
        FailureClass::Check check;
        check.resolution = static_cast<size_t>(n - 1);
        check.overrides = strings(e.find("overrides"), c.id + ".verify.overrides");
        if (check.overrides.empty()) throw ScenarioError(e.loc.str() + ": " + c.id + ".verify: expected overrides");
        c.checks.push_back(std::move(check));
      }
    }
    kb.classes_.push_back(std::move(c));
  }
  return kb;
}

const KnowledgeBase& KnowledgeBase::shipped() {
  static const KnowledgeBase kb = [] {
    const std::filesystem::path p = std::filesystem::path(dbh_home()) / "reports" / "kb" / "failures.yaml";
    std::error_code ec;
    if (!std::filesystem::exists(p, ec)) {
      // An empty knowledge base would silently classify every failure as
      // "exception" and reject every `expect.class`.
      throw UsageError(p.string() + ": expected dbh's failure knowledge base (looked under " +
                       dbh_home_origin() + "), got " + describe_path(p.string()));
    }
    return load(p.string());
  }();
  return kb;
}

const FailureClass* KnowledgeBase::match_message(const std::string& message, bool under_host_budget) const {
  for (const auto& c : classes_) {
    for (const auto& sig : c.signatures) {
      if (message.find(sig) != std::string::npos) return &c;
    }
  }
  if (!under_host_budget) return nullptr;
  for (const auto& c : classes_) {
    for (const auto& sig : c.under_host_budget) {
      if (message.find(sig) != std::string::npos) return &c;
    }
  }
  return nullptr;
}

const FailureClass* KnowledgeBase::find(const std::string& id) const {
  for (const auto& c : classes_) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

}  // namespace dbh::harness::kb
