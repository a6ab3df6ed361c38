#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/json_fields.h"

namespace dbh::harness::proto {

/// Version of the worker → supervisor event stream. Event names and the keys
/// listed here are frozen once released; new keys may be added.
inline constexpr int kEventSchemaVersion = 1;

/// Event types, in the order a healthy run emits them:
///   hello → [memory_budget] → [eval_check] → (run_begin → (step_begin →
///   [batch|fault_fired|health|heartbeat]* → step_end → [checkpoint] →
///   [eval → eval_overlays])* → run_end)* → done.
/// `warning`, `heartbeat` and `error` may appear anywhere; `overlays` and
/// `memory_snapshot` follow the `error` of a failed run. The fields of each
/// are those of its struct in harness/proto/event_types.h; docs/events.md
/// lists every one (tests/unit/harness/event_list_test.cc keeps them equal).
namespace event {
inline constexpr const char* kHello = "hello";            // schema_version, pid, seed, scenario_hash, git, …
inline constexpr const char* kMemoryBudget = "memory_budget";  // applied, method, budget_bytes, …
inline constexpr const char* kEvalCheck = "eval_check";   // hmean, images, words (the evaluator scoring the ground truth)
inline constexpr const char* kDataset = "dataset";        // size (the training set an external worker's loader reads)
inline constexpr const char* kRunBegin = "run_begin";     // run, memory
inline constexpr const char* kStepBegin = "step_begin";   // run, step
inline constexpr const char* kBatch = "batch";            // run, step, samples (ids of the batch)
inline constexpr const char* kSampleRead = "sample_read"; // index, name, error (a sample the loader read)
inline constexpr const char* kFaultFired = "fault_fired"; // fault, index, run, step, module, detail
inline constexpr const char* kHealth = "health";          // run, step, check, site, kind, module, …
inline constexpr const char* kHeartbeat = "heartbeat";    // run, step, module
inline constexpr const char* kStepEnd = "step_end";       // run, step, loss, bce, l1, dice, lr, grad_norm, seconds, …
inline constexpr const char* kCheckpoint = "checkpoint";  // run, step, path, resumed
inline constexpr const char* kEval = "eval";              // run, step, precision, recall, hmean, …
inline constexpr const char* kEvalOverlays = "eval_overlays";  // run, step, files
inline constexpr const char* kRunEnd = "run_end";         // run, steps, memory, checksum
inline constexpr const char* kWarning = "warning";        // message
inline constexpr const char* kError = "error";            // kind, run, step, phase, message, backtrace, module, …
inline constexpr const char* kOverlays = "overlays";      // run, step, files (the failing batch drawn)
inline constexpr const char* kMemorySnapshot = "memory_snapshot";  // run, step, file (CUDA allocator snapshot on OOM)
inline constexpr const char* kTuningProgress = "tuning_progress";  // done, total (timed steps of a measurement)
inline constexpr const char* kTuning = "tuning";          // device, size, batch, precision, candidates, others_cores, error
inline constexpr const char* kDone = "done";              // status, memory

/// Every event type a worker writes, in the order above.
inline constexpr std::array<const char*, 23> kAll = {
    kHello,      kMemoryBudget, kEvalCheck, kDataset,   kRunBegin,   kStepBegin,      kBatch,
    kSampleRead, kFaultFired,   kHealth,    kHeartbeat, kStepEnd,    kCheckpoint,     kEval,
    kEvalOverlays, kRunEnd,     kWarning,   kError,     kOverlays,   kMemorySnapshot, kTuningProgress,
    kTuning,     kDone};

/// Whether `type` is one of kAll. Readers skip events they do not know (a
/// newer worker's), so this is for checks and tools, not for decoding.
bool is_known(std::string_view type);
}  // namespace event

/// One decoded event: its type and the whole JSON object (type included).
struct Event {
  std::string type;
  nlohmann::json body;
  double t = 0;  // seconds since the worker started

  /// The field as a T, or `fallback` (Note [Reading JSON that may lie]:
  /// absent, null, mistyped or out of T's range).
  template <typename T>
  T get(const std::string& key, T fallback) const {
    return field_or(body, key, std::move(fallback));
  }
  bool has(const std::string& key) const { return body.contains(key); }
};

/// Encodes one event as a single line (no embedded newlines) ending in '\n'.
std::string encode_event(const std::string& type, nlohmann::json fields, double t);

/// Decodes one line. Throws ProtocolError naming `where` (e.g.
/// "events.jsonl:12") on invalid JSON, a non-object or a missing "type".
Event decode_event(const std::string& line, const std::string& where);

/// Note [A worker's stream is bounded]: what a worker writes is untrusted
/// input of any size. A line longer than kMaxEventLineBytes is skipped as a
/// bad line without being held (its bytes are counted, not kept), at most
/// kMaxBadLines bad lines are kept (then one line saying how many more were
/// dropped), and a bad line's text quotes at most a few hundred bytes of it.
inline constexpr size_t kMaxEventLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxBadLines = 100;

/// Note [Depth is input]: a line within kMaxEventLineBytes can still nest
/// half a million arrays, and every copy, comparison or dump of a JSON value
/// recurses once per level: a worker's structure is refused before it is
/// parsed when it nests deeper than kMaxEventDepth (the event object itself
/// is level 1; `hello`'s `config` values start at level 3). The adapter
/// reads the same limit (python/dbh_adapter/_events.py, MAX_EVENT_DEPTH).
inline constexpr size_t kMaxEventDepth = 64;

/// How deep `text`'s arrays and objects nest, counted without parsing
/// (brackets inside strings are text) and no further than `limit` + 1: a
/// result above `limit` says "deeper than limit".
size_t json_nesting(std::string_view text, size_t limit = kMaxEventDepth);

/// "" for none, else "; the event stream's bad line(s): <the first two>":
/// where an event was expected and not found (a `hello` over the line
/// bound), the line that was not read says why.
std::string bad_lines_note(const std::vector<std::string>& bad_lines);

/// Splits a stream read in pieces (the supervisor's pipe) into events, line
/// by line as they complete; decode_stream is this over a whole text.
class StreamDecoder {
 public:
  /// `name` locates bad lines ("events.jsonl:12: …").
  explicit StreamDecoder(std::string name) : name_(std::move(name)) {}
  /// Decodes every line `data` completes and hands each event to `on_event`,
  /// in order; a line that does not decode goes to `bad_lines` and is
  /// skipped, as are empty lines (which still count for line numbers).
  void feed(std::string_view data, const std::function<void(Event&&)>& on_event,
            std::vector<std::string>& bad_lines);
  /// What follows the last '\n' so far: a torn write once the stream ended
  /// (at most kMaxEventLineBytes of it).
  const std::string& pending() const { return pending_; }

 private:
  void bad(std::string why, std::vector<std::string>& bad_lines);

  std::string name_;
  std::string pending_;
  int64_t line_no_ = 0;
  bool skipping_ = false;      // in a line longer than kMaxEventLineBytes
  size_t skipped_bytes_ = 0;   // its bytes so far
  int64_t bad_dropped_ = 0;    // bad lines beyond kMaxBadLines
};

/// Splits a stream into events. A final line without '\n' is a torn write of
/// a dying worker: it is returned in `torn_tail` and not decoded. Lines that do
/// not decode are collected in `bad_lines` (with their location) and skipped.
struct DecodedStream {
  std::vector<Event> events;
  std::string torn_tail;
  std::vector<std::string> bad_lines;
};
DecodedStream decode_stream(const std::string& text, const std::string& name);

}  // namespace dbh::harness::proto
