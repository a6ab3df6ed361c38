#include "harness/report/knowledge_base.h"

#include <cstdlib>
#include <filesystem>

#include "harness/common/error.h"
#include "harness/scenario/value.h"

#ifndef DBH_SOURCE_DIR_DEFAULT
#define DBH_SOURCE_DIR_DEFAULT "."
#endif

namespace dbh::harness {

std::string dbh_home() {
  if (const char* home = std::getenv("DBH_HOME"); home != nullptr && *home) return home;
  return DBH_SOURCE_DIR_DEFAULT;
}

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
    c.events = strings(item.find("events"), c.id + ".events");
    c.causes = strings(item.find("causes"), c.id + ".causes");
    c.resolutions = strings(item.find("resolutions"), c.id + ".resolutions");
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
    if (!std::filesystem::exists(p)) return KnowledgeBase{};
    return load(p.string());
  }();
  return kb;
}

const FailureClass* KnowledgeBase::match_message(const std::string& message) const {
  for (const auto& c : classes_) {
    for (const auto& sig : c.signatures) {
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

}  // namespace dbh::harness
