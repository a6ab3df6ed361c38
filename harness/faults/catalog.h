#pragma once

#include <string>
#include <vector>

namespace dbh::harness {

/// The type of a fault parameter, for validation and `dbh list faults`.
enum class ParamType { kInt, kDouble, kString, kBool, kBytes };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  bool required = false;
  std::string default_value;           // as written in YAML; "" = none
  std::vector<std::string> allowed;    // for strings; empty = any
  std::string help;
};

/// A fault injector's name, purpose and parameters. Every fault also takes
/// the schedule parameters `at_step`, `until_step` and `run`.
struct FaultSpec {
  std::string name;
  std::string help;
  std::vector<ParamSpec> params;
  /// Without an `until_step`, the fault fires at every step from `at_step`
  /// on (a broken pipeline stays broken) instead of at `at_step` only.
  bool from_at_step_on = false;
};

/// Every fault dbh can inject, in `dbh list faults` order.
const std::vector<FaultSpec>& fault_catalog();
const FaultSpec* find_fault(const std::string& name);

/// The schedule parameters shared by every fault.
const std::vector<ParamSpec>& schedule_params();

std::string to_string(ParamType t);

}  // namespace dbh::harness
