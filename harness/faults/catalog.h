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
};

/// Every fault dbh can inject, in `dbh list faults` order.
const std::vector<FaultSpec>& fault_catalog();
const FaultSpec* find_fault(const std::string& name);

/// The schedule parameters shared by every fault.
const std::vector<ParamSpec>& schedule_params();

std::string to_string(ParamType t);

}  // namespace dbh::harness
