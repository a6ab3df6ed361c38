#pragma once

// A trial's event stream read, as it arrives, into its records
// (TrialAnalysis) and the events its verdict reads (EventDigest), and how
// whatever is quoted from the worker is bounded. The trial feeds an
// EventDigester (scenario_trial.cc); classify() reads it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::supervisor {

/// Note [A trial's events are read as they arrive]: the step records kept
/// (EventDigester).
inline constexpr size_t kMaxStepRecords = 50000;
/// Note [A trial's events are read as they arrive]: what the records keep of
/// the worker's lists, each within a budget whatever a worker sends (about
/// 100 MiB in all, at most): micro-batch losses, at most kMaxMicroBatchBits
/// a step and kMaxMicroBatchBitsKept in all; a step's memory record of at
/// most kMaxPhases phases of kMaxPhaseFigures numbers each; the module
/// numbers of a trial, at most kMaxModuleRecords entries; the sample ids of
/// its batches and the names of the samples read, at most
/// kMaxSampleTextBytes each; at most kMaxEvalRecords validations.
inline constexpr size_t kMaxMicroBatchBits = 1024;
inline constexpr size_t kMaxMicroBatchBitsKept = size_t{1} << 20;
inline constexpr size_t kMaxPhases = 8;
inline constexpr size_t kMaxPhaseFigures = 8;
inline constexpr size_t kMaxModuleRecords = 50000;
inline constexpr size_t kMaxSampleTextBytes = size_t{16} << 20;
inline constexpr size_t kMaxEvalRecords = 1000;

/// A name the worker chose (a module, a site, a kind), as every part keeps
/// it: cut to kMaxQuotedNameBytes, otherwise as sent (Note [Escaped at output
/// only]).
inline constexpr size_t kMaxQuotedNameBytes = 200;
std::string quoted_name(const std::string& s);

}  // namespace dbh::harness::supervisor

namespace dbh::harness::supervisor::internal {

// Note [A worker's stream is bounded]: every string the analysis quotes
// from the worker (messages, modules, warnings, evidence) is cut, and lists
// of them are bounded, so no report, terminal line or annotation carries a
// worker's megabytes.
inline constexpr size_t kMaxQuotedBytes = 2000;
inline constexpr size_t kMaxQuotedItems = 100;
/// `s` cut to `max` bytes (whole UTF-8 characters).
std::string quoted(const std::string& s, size_t max = kMaxQuotedBytes);
/// A worker's JSON as kept for the reports (a health event's body): every
/// string cut to kMaxQuotedNameBytes, at most kMaxQuotedItems entries per
/// object or list, at most four levels deep.
nlohmann::json bounded_json(const nlohmann::json& j, int depth = 0);

/// The checks of the silent-failure monitors, each also its failure class.
bool is_silent_check(const std::string& check);

// The events a verdict reads, kept as they arrive: the few it needs whole,
// the rest as the quoted messages the failure lists.
struct EventDigest {
  std::optional<proto::Event> first_error;     // the first error that is not a divergence
  std::optional<proto::Event> harness_error;   // the worker's own failure
  std::optional<proto::Event> unavailable;     // the first error of kind unavailable
  /// Every other error but harness errors, in order, as "phase: message"
  /// (at most kMaxQuotedItems).
  std::vector<std::string> other_errors;
  std::optional<proto::Event> primary_health;  // the first primary finite finding
  std::optional<proto::Event> silent_health;   // the first primary silent-failure finding
  std::string done_status;
  bool hello_seen = false;                     // a `hello` came (Note [A pass names its scenario])
  std::optional<int64_t> open_step, open_run;  // a step_begin without its step_end
  std::set<int64_t> samples_read;              // `sample_read` indices, each once
  int64_t dataset_claims_refused = 0;          // `dataset` sizes past kMaxDatasetSamples
  std::optional<int64_t> resumed_at;           // the step a `checkpoint` event (resumed) says
  proto::FlatConfig config;                    // `hello`'s composed configuration (Note [Keys a worker confirms])
  /// Note [The schedule asked for]: each run's steps as reported, in a
  /// summary that stays the same size however many steps come (at most
  /// kMaxScheduleRuns runs; more is `too_many_runs`).
  struct RunSteps {
    int64_t count = 0, first = 0, last = 0;
    bool in_order = true;  // every step one more than the one before it
  };
  std::map<int64_t, RunSteps> run_steps;
  bool too_many_runs = false;
  /// A `fault_fired` event as the fault list reads it (at most
  /// kMaxFaultFirings; ClassifyOptions::withhold_fault_records leaves them
  /// out).
  struct Firing {
    int64_t index = 0, step = 0;
    std::string module;
    std::optional<bool> real;
    std::string hardware_error;
  };
  std::vector<Firing> firings;
  // What the budgets above have used so far.
  size_t module_records = 0;
  size_t micro_bits = 0;
  size_t batch_text_bytes = 0;
  size_t sample_name_bytes = 0;
};
inline constexpr size_t kMaxScheduleRuns = 1024;
inline constexpr size_t kMaxFaultFirings = 10000;

}  // namespace dbh::harness::supervisor::internal

namespace dbh::harness::supervisor {

/// Note [A trial's events are read as they arrive]: the supervisor keeps
/// what a trial's events say, not the events. Each event, as it is decoded,
/// fills the trial's records (steps, evaluations, runs, faults, memory,
/// warnings, samples) and the few events the verdict reads; every list is
/// bounded, so dbh's memory stays flat however long a trial runs and
/// whatever a worker sends. Past kMaxStepRecords steps (and as many `batch`
/// events) a step is counted, and its memory and schedule are read, but its
/// record is not kept; a step's per-phase memory and per-module numbers are
/// kept for the first kMaxDetailedSteps steps.
class EventDigester {
 public:
  /// Reads the trial's next event.
  void feed(const proto::Event& e);
  /// The trial's records read so far.
  const TrialAnalysis& records() const { return a_; }
  /// What the verdict reads.
  const internal::EventDigest& digest() const { return d_; }

 private:
  TrialAnalysis a_;
  internal::EventDigest d_;
};

}  // namespace dbh::harness::supervisor
