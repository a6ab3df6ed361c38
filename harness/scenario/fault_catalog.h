#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dbh::harness::scenario {

struct FaultConfig;
struct FaultParam;
struct Scenario;

/// The type of a fault parameter, for validation and `dbh list faults`.
/// kModule: a module name the model reports (model::run_module);
/// kModulePrefix: one, or a prefix of one ("head" for every head module).
enum class ParamType { kInt, kDouble, kString, kBool, kBytes, kModule, kModulePrefix };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  bool required = false;
  std::string default_value;           // as written in YAML; "" = none
  std::vector<std::string> allowed;    // for strings; empty = any
  std::string help;
};

/// What a placement check sees: one fault as the scenario schedules it, the
/// scenario around it, and how to say that it cannot act there.
struct FaultPlacement {
  const FaultConfig& fault;
  const Scenario& scenario;
  /// The samples training reads, where known (a real dataset's size less the
  /// held-out ones, or data.samples); read from the dataset on first call
  /// when `reads_inputs`.
  std::function<std::optional<int64_t>()> samples;
  /// Whether the check may read the dataset (check_scenario_inputs) or sees
  /// the scenario alone (decode_scenario; Note [Decode, then check]).
  bool reads_inputs = false;
  /// data.source was set by an override (a control run, a command line) or
  /// comes from a resolved tree: a fault it leaves nothing to act on is then
  /// tolerated rather than a mistake of the scenario file.
  bool source_overridden = false;
  /// Throws "LOC: faults[i].PARAM: expected EXPECTED, got GOT", located at
  /// the parameter where it is written, else at the fault.
  std::function<void(const std::string& param, const std::string& expected, const std::string& got)> fail_param;
  /// Throws "LOC: faults[i]: expected EXPECTED, got GOT", located at
  /// `at_param` where given and written, else at the fault.
  std::function<void(const std::string& expected, const std::string& got, const std::string& at_param)> fail;
};

// Note [Fault registry] (the injector's half is in faults/injectors.cc): a fault is
// one entry here, its parameters, schedule and the placements it refuses,
// and one entry of the injector's registry, what it does at the hooks of a
// training step. Adding a fault touches those two entries and its test.

/// A fault's name, purpose, parameters and placement rules. Every fault also
/// takes the schedule parameters `at_step`, `until_step` and `run`.
struct FaultSpec {
  std::string name;
  std::string help;
  std::vector<ParamSpec> params;
  /// Without an `until_step`, the fault fires at every step from `at_step`
  /// on (a broken pipeline stays broken) instead of at `at_step` only.
  bool from_at_step_on = false;
  /// Acts once before training (a dataset copy, a memory cap) rather than at
  /// a step: its `at_step` need not lie below train.max_steps.
  bool before_training = false;
  /// Refuses a placement where the fault cannot act, through
  /// FaultPlacement's fail functions (beyond its parameters' types and
  /// allowed values, which the loader checks from `params`); null: any.
  void (*check)(const FaultPlacement&) = nullptr;
};

/// Every fault dbh can inject, in `dbh list faults` order.
const std::vector<FaultSpec>& fault_catalog();
const FaultSpec* find_fault(const std::string& name);

/// The schedule parameters shared by every fault.
const std::vector<ParamSpec>& schedule_params();

std::string to_string(ParamType t);

/// Parameter `spec` written as `text`, decoded to its type's value (a byte
/// size to bytes, a flag to bool); nullopt when `text` is not of that type.
/// Allowed values and module names are checked by the loader.
std::optional<FaultParam> decode_fault_param(const ParamSpec& spec, const std::string& text);

}  // namespace dbh::harness::scenario
