#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dbh::harness::kb {

/// One failure class of the knowledge base (reports/kb/failures.yaml).
struct FailureClass {
  std::string id;  // e.g. "cudnn_execution_failed"
  std::string title;
  std::vector<std::string> signatures;  // substrings of error messages
  /// Substrings that identify the class only in a trial whose data segment
  /// was capped (a host memory budget applied as RLIMIT_DATA): there a
  /// library's failure that does not say why (oneDNN's "could not create a
  /// primitive", a shared object that cannot be mapped) is the cap refusing
  /// an allocation. YAML key `under_host_budget`.
  std::vector<std::string> under_host_budget;
  std::vector<std::string> events;      // monitor findings / process facts
  std::vector<std::string> causes;
  std::vector<std::string> resolutions;
  /// `silent: true`: the run stays finite but learns nothing or its metrics
  /// miss (docs/scenarios.md, "Silent failures"); diagnose asks whether the model learns.
  bool silent = false;
  /// Resolutions dbh can try as control runs (`--verify-resolutions`): the
  /// 0-based resolution and the overrides that apply it. Values may be
  /// `{key*N}` or `{key/N}` (integers, at least 1), computed from the
  /// scenario's resolved value of `key`.
  struct Check {
    size_t resolution = 0;
    std::vector<std::string> overrides;
  };
  std::vector<Check> checks;
};

class KnowledgeBase {
 public:
  /// Loads the YAML file; throws ScenarioError (file:line:col) when malformed.
  static KnowledgeBase load(const std::string& path);
  /// The knowledge base shipped with dbh: reports/kb/failures.yaml under
  /// dbh_home(), loaded once. Throws UsageError naming the path it looked in
  /// when there is none, ScenarioError when it is malformed.
  static const KnowledgeBase& shipped();

  /// The class whose signature occurs in `message`, or nullptr; with
  /// `under_host_budget`, a class's `under_host_budget` substrings count too
  /// (after every class's own signatures).
  const FailureClass* match_message(const std::string& message, bool under_host_budget = false) const;
  const FailureClass* find(const std::string& id) const;
  const std::vector<FailureClass>& classes() const { return classes_; }

 private:
  std::vector<FailureClass> classes_;
};

/// The overrides that apply `check` to a scenario whose resolved JSON
/// (resolved_json) is `resolved`, templates computed (Note [Resolutions that
/// are tried]); nullopt when a template's key has no numeric value, when the
/// check changes only CUDA/cuDNN settings of a scenario on the CPU, or only an
/// injected fault's own parameters (Note [Resolutions that cannot tell here]).
/// `*changes` says whether any of them changes the scenario.
/// `*why_not` (when given) says why a check that cannot tell here is not tried.
std::optional<std::vector<std::string>> check_overrides(const FailureClass::Check& check, const nlohmann::json& resolved,
                                                        bool* changes, std::string* why_not = nullptr);

}  // namespace dbh::harness::kb
