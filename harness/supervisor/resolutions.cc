#include "harness/supervisor/resolutions.h"

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::supervisor {

std::string to_string(ResolutionVerdict v) {
  switch (v) {
    case ResolutionVerdict::kConfirmed: return "confirmed";
    case ResolutionVerdict::kRefuted: return "refuted";
    case ResolutionVerdict::kUnresolved: return "unresolved";
    case ResolutionVerdict::kNotApplicable: return "not applicable";
  }
  return "not applicable";
}

ResolutionVerdict resolution_verdict(scenario::Outcome o) {
  // A run cut short, or one this machine could not run, says nothing.
  if (o == scenario::Outcome::kUnresolved || o == scenario::Outcome::kSkipped) return ResolutionVerdict::kUnresolved;
  return is_failure(o) ? ResolutionVerdict::kRefuted : ResolutionVerdict::kConfirmed;
}

namespace {

// Note [A measured value over a rule of thumb]: each override of `check`
// that sets a key `measured` holds takes the measured value.
void apply_measured(ResolutionCheck& check, const MeasuredValues& measured) {
  for (auto& o : check.overrides) {
    for (const auto& [key, value] : measured.values) {
      if (!scenario::override_sets(o, key)) continue;
      o = scenario::override_text(key, value);
      check.measured_by = measured.by;
    }
  }
}

}  // namespace

std::vector<ResolutionCheck> try_resolutions(const kb::FailureClass& cls, const nlohmann::json& resolved,
                                             const RunResolution& run, const std::function<bool()>& stop,
                                             const MeasuredValues& measured) {
  std::vector<ResolutionCheck> checks;
  for (size_t k = 0; k < cls.checks.size(); ++k) {
    if (stop()) break;
    ResolutionCheck check;
    check.resolution = cls.checks[k].resolution;
    bool changes = false;
    const auto applied = kb::check_overrides(cls.checks[k], resolved, &changes, &check.why_not);
    if (applied) {
      check.overrides = *applied;
      apply_measured(check, measured);
    }
    if (!applied || !changes) {
      checks.push_back(check);  // not applicable: it changes nothing here, or cannot tell
      continue;
    }
    auto with = check.overrides;
    with.push_back("controls=[]");
    try {
      const ResolutionRun r = run(check, with, k);
      check.outcome = to_string(r.outcome);
      check.klass = r.klass;
      check.dir = r.dir;
      check.verdict = resolution_verdict(r.outcome);
    } catch (const ScenarioError& e) {
      check.klass = one_line(e.what());  // the overrides do not fit this scenario
    }
    checks.push_back(check);
  }
  return checks;
}

void spell_as_passed(std::vector<ResolutionCheck>& checks, const scenario::Scenario& s) {
  for (auto& c : checks) {
    for (const auto& o : c.overrides) {
      if (const auto written = as_the_command_writes(s, o)) c.as_passed.push_back(*written);
    }
  }
}

}  // namespace dbh::harness::supervisor
