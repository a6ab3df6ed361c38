#include "harness/run/run_report.h"

namespace dbh::harness::run {

RunVerdict verdict_of(const RunReport& r) {
  if (r.expectation_met) return RunVerdict::kMet;
  return r.not_run_here() ? RunVerdict::kSkipped : RunVerdict::kNotMet;
}

std::string to_string(RunVerdict v) {
  switch (v) {
    case RunVerdict::kMet: return "met";
    case RunVerdict::kNotMet: return "not met";
    case RunVerdict::kSkipped: return "skipped";
  }
  return "not met";
}

VerdictCounts count_verdicts(const std::vector<RunReport>& runs) {
  VerdictCounts c;
  for (const auto& r : runs) {
    switch (verdict_of(r)) {
      case RunVerdict::kMet: ++c.met; break;
      case RunVerdict::kNotMet: ++c.not_met; break;
      case RunVerdict::kSkipped: ++c.skipped; break;
    }
  }
  return c;
}

}  // namespace dbh::harness::run
