#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/event_types.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::supervisor {

// Note [The worker contract]: every command of dbh reads one thing from a
// training, its event stream (docs/events.md). The built-in worker is one
// program that writes it; the user's own training is another, started as
// `worker.command` with the environment below and speaking the same events
// (docs/worker-protocol.md, checked against this file by
// tests/unit/harness/worker_protocol_test.cc). What a command asks of a
// training it says as scenario keys (train.stop_after, data.subset, a
// fault, …); each such key needs a capability, which an external worker
// lists in its `hello`. dbh starts the command once in describe mode before
// anything runs and refuses (exit 2) a command the worker cannot serve,
// naming the capability.

/// Version of the worker contract: the environment, argv and capabilities
/// below. The events have their own (kEventSchemaVersion).
inline constexpr int kWorkerProtocolVersion = 1;

/// The variables dbh sets for an external worker.
namespace worker_env {
inline constexpr const char* kProtocol = "DBH_WORKER_PROTOCOL";  // kWorkerProtocolVersion
inline constexpr const char* kEventFd = "DBH_EVENT_FD";          // the event pipe's descriptor (3)
inline constexpr const char* kScenario = "DBH_SCENARIO";         // the resolved scenario (JSON file)
inline constexpr const char* kScenarioHash = "DBH_SCENARIO_HASH";  // its hash, for `hello`
inline constexpr const char* kTrialDir = "DBH_TRIAL_DIR";        // the trial's folder: the worker's only place to write
inline constexpr const char* kTrial = "DBH_TRIAL";               // the trial's index
inline constexpr const char* kDescribe = "DBH_WORKER_DESCRIBE";  // "1": write hello and done, train nothing
}  // namespace worker_env

/// One capability an external worker may serve, and the scenario settings
/// that need it.
struct CapabilityDoc {
  const char* name;
  const char* needed_for;  // the keys or commands that need it, in words
};
/// Every capability of the contract, in the order docs/worker-protocol.md
/// lists them. A fault's capability is "fault:" + its name (one row stands
/// for them all).
const std::vector<CapabilityDoc>& worker_capabilities();

namespace capability {
inline constexpr const char* kLossBits = "loss_bits";
inline constexpr const char* kStopAfter = "stop_after";
inline constexpr const char* kCheckpoint = "checkpoint";
inline constexpr const char* kResume = "resume";
inline constexpr const char* kSubset = "subset";
inline constexpr const char* kMonitorsFinite = "monitors.finite";
inline constexpr const char* kMonitorsLocalise = "monitors.localise";
inline constexpr const char* kMonitorsSilent = "monitors.silent";
inline constexpr const char* kMonitorsNumerics = "monitors.numerics";
inline constexpr const char* kMemoryBudget = "memory_budget";
inline constexpr const char* kInProcessRuns = "in_process_runs";
inline constexpr const char* kSyntheticData = "synthetic_data";
inline constexpr const char* kFixedBatch = "fixed_batch";
inline constexpr const char* kNumericsStates = "numerics_states";
inline constexpr const char* kOps = "ops";
inline constexpr const char* kValidation = "validation";
inline constexpr const char* kFaultPrefix = "fault:";
}  // namespace capability

/// What running `s` needs of its worker, each with the key that needs it:
/// {"subset", "data.subset"}, {"fault:nan_activation", "faults.0"}, ….
/// Checks a scenario asks for but can run without (the silent-failure
/// monitors) are in `optional`.
struct WorkerNeeds {
  std::vector<std::pair<std::string, std::string>> required;
  std::vector<std::pair<std::string, std::string>> optional;
};
WorkerNeeds worker_needs(const scenario::Scenario& s);

/// The dbh keys an external worker receives as `key=value` arguments after
/// its command, with the user's key and dbh's value as the command line
/// writes it (trainer.precision=16-mixed for train.precision fp16).
struct PassedKey {
  std::string dbh_key, user_key, value;
};
std::vector<PassedKey> passed_keys(const scenario::Scenario& s);

/// How the command of `s`'s external worker writes dbh's `key=value` when
/// dbh passes it: the user's key and the value as passed, in the command's
/// syntax (`--lr 0.01`, `-o Optimizer.lr.learning_rate=0.01`,
/// `trainer.precision=32-true` for train.precision=fp32). Nothing for dbh's
/// own worker or a key dbh does not pass. What every report line that says
/// "(your `…`)" prints.
std::optional<std::string> as_the_command_writes(const scenario::Scenario& s, const std::string& dbh_override);

/// Note [Keys a worker confirms]: a worker whose `hello` reports its composed
/// configuration (`config`) says what its training read, and each key dbh
/// passed (passed_keys) that the configuration holds must hold the value dbh
/// passed: a number equal as a number, a flag as a flag, a text as the same
/// text or the same path. A training that swallowed `optim.lr=0.5` and trained
/// with 0.1 trained another configuration than the one asked for. The first
/// key that does not hold its value, as "passed <user key>=<value> (<dbh
/// key>), but the worker's configuration holds <value>"; "" when every key
/// found holds its value, or there is no configuration to read. The
/// configuration is read as from-command reads it (Note [One flattening of a
/// worker's configuration]); one cut before a passed key cannot confirm it.
std::string keys_not_applied(const scenario::Scenario& s, const proto::FlatConfig& config);

/// Note [Keys that never reach the worker]: an external worker receives the
/// keys of passed_keys() on its command line and nothing else of dbh's
/// training keys (train.grad_clip, model.*, …); dbh reads its own sections
/// (limits, expect, monitors, repeat, faults) and the keys a capability
/// serves itself. The first is the reason `key` set on `s` would change
/// nothing in the worker's training ("" when it reaches it, dbh reads it, or
/// the worker is dbh's own).
std::string key_not_passed(const scenario::Scenario& s, const std::string& key);
/// The first of `overrides` (key=value) that key_not_passed refuses, its
/// reason; "" when every one reaches the worker or is dbh's.
std::string overrides_not_passed(const scenario::Scenario& s, const std::vector<std::string>& overrides);

/// Note [The user's own names]: what to change when a worker that ended
/// before `hello` refused a word dbh passed, read from the end of its stderr
/// ("" when its error names none of them). A key counts as named only as a
/// whole word of the error itself, not of the usage text an argparse error
/// prints before it (which names every option).
std::string refused_key_hint(const scenario::Scenario& s, const std::string& stderr_tail);

/// The process spec of an external worker's trial of `s` in `dir`, whose
/// resolved scenario is at `resolved`.
TrialSpec external_trial_spec(const scenario::Scenario& s, const std::string& resolved, const std::string& dir,
                              int64_t index);

/// Why `s`'s external worker cannot run on this machine, or nullopt: a CUDA
/// device asked of a machine that shows no NVIDIA GPU (machine.h). Such a
/// trial is not started (its outcome is `skipped`, as dbh's own worker's is)
/// and the worker is not described.
std::optional<std::string> external_device_unavailable(const scenario::Scenario& s);

/// What an external worker says of itself in describe mode.
struct WorkerDescription {
  std::string worker;  // name and version
  std::vector<std::string> capabilities;
  std::vector<std::string> modules;
  /// Its composed configuration (`hello`'s `config`), flattened (Note [One
  /// flattening of a worker's configuration]); empty when it sent none.
  std::vector<std::pair<std::string, nlohmann::json>> config;
  /// Its command-line parser's options (`hello`'s `options`), bounded
  /// (scenario::kMaxParserOptions); empty when it sent none.
  std::vector<scenario::ParserOption> options;
};

/// Starts `s`'s worker command once in describe mode (in a scratch folder
/// removed afterwards) and returns its `hello`. Cached per process for the
/// same command, folder and environment. Throws UsageError naming the
/// command and what it printed when it does not answer with a `hello` of
/// this protocol.
WorkerDescription describe_worker(const scenario::Scenario& s);

/// The options of a `hello`'s `options` list that are well formed (a
/// destination and option strings of one word each, a known kind), at most
/// scenario::kMaxParserOptions; every other item is left out.
std::vector<scenario::ParserOption> parser_options(const nlohmann::json& list);

/// The first capability running `s` needs that its external worker does not
/// serve, or nullopt (also for dbh's built-in worker). Throws as
/// describe_worker does.
std::optional<std::string> missing_capability(const scenario::Scenario& s);

/// For a scenario with an external worker: checks that the worker serves
/// every capability running `s` needs, plus `command_needs` (what the
/// command will ask of it: {capability, what asks}), and that every module a
/// fault or expectation names is one of its modules. Throws UsageError (exit
/// 2) naming the first capability missing, what needs it and the worker's
/// list. Returns notes for what it will run without (optional checks the
/// worker does not serve). Does nothing for dbh's built-in worker.
std::vector<std::string> check_worker(const scenario::Scenario& s,
                                      const std::vector<std::pair<std::string, std::string>>& command_needs = {});

}  // namespace dbh::harness::supervisor
