#pragma once

// A trial's event stream read into its records (TrialAnalysis) and the
// events its verdict reads (EventDigest), and how whatever is quoted from
// the worker is bounded. Part of the supervisor's classification
// (outcome.cc); not used outside it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/events.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::internal {

// Note [A worker's stream is bounded]: every string the analysis quotes
// from the worker (messages, modules, warnings, evidence) is cut, and lists
// of them are bounded, so no report, terminal line or annotation carries a
// worker's megabytes.
inline constexpr size_t kMaxQuotedBytes = 2000;
inline constexpr size_t kMaxQuotedNameBytes = 200;
inline constexpr size_t kMaxQuotedItems = 100;
/// `s` cut to `max` bytes (whole UTF-8 characters).
std::string quoted(const std::string& s, size_t max = kMaxQuotedBytes);
/// A name the worker chose (a module, a site, a kind): one line, cut.
std::string quoted_name(const std::string& s);
/// A worker's JSON as kept for the reports (a health event's body): every
/// string cut to kMaxQuotedNameBytes, at most kMaxQuotedItems entries per
/// object or list, at most four levels deep.
nlohmann::json bounded_json(const nlohmann::json& j, int depth = 0);

/// The checks of the silent-failure monitors, each also its failure class.
bool is_silent_check(const std::string& check);

// The events a verdict reads, found while the trial's records are filled.
struct EventDigest {
  const Event* first_error = nullptr;    // the first error that is not a divergence
  const Event* harness_error = nullptr;  // the worker's own failure
  const Event* unavailable = nullptr;    // the first error of kind unavailable
  std::vector<const Event*> errors;      // every error but harness errors
  const Event* primary_health = nullptr;  // the first primary finite finding
  const Event* silent_health = nullptr;   // the first primary silent-failure finding
  std::string done_status;
  std::optional<int64_t> open_step, open_run;  // a step_begin without its step_end
  std::set<int64_t> samples_read;               // `sample_read` indices, each once
  std::optional<int64_t> resumed_at;            // the step a `checkpoint` event (resumed) says
  nlohmann::json config;                        // `hello`'s composed configuration (Note [Keys a worker confirms])
};

/// Fills `a`'s records from the trial's `events` (steps, evaluations,
/// runs, faults, memory, warnings) and returns what the verdict reads.
EventDigest read_events(const std::vector<Event>& events, const ClassifyOptions& opts, TrialAnalysis& a);

}  // namespace dbh::harness::internal
