#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dbh::harness {

/// Version of the worker → supervisor event stream. Event names and the keys
/// listed here are frozen once released; new keys may be added.
inline constexpr int kEventSchemaVersion = 1;

/// Event types, in the order a healthy run emits them:
///   hello → (run_begin → (step_begin → [fault_fired|health]* → step_end)* →
///   run_end)* → done.
/// `checkpoint`, `warning`, `heartbeat` and `error` may appear anywhere.
namespace event {
inline constexpr const char* kHello = "hello";            // schema_version, pid, seed, scenario_hash, git
inline constexpr const char* kRunBegin = "run_begin";     // run, memory
inline constexpr const char* kStepBegin = "step_begin";   // run, step
inline constexpr const char* kStepEnd = "step_end";       // run, step, loss, bce, l1, dice, lr, grad_norm, seconds, memory, loss_bits
inline constexpr const char* kBatch = "batch";            // run, step, samples (ids of the batch)
inline constexpr const char* kFaultFired = "fault_fired"; // fault, index, run, step, module, detail
inline constexpr const char* kHealth = "health";          // run, step, check, site, kind, module, detail, stats
inline constexpr const char* kCheckpoint = "checkpoint";  // run, step, path
inline constexpr const char* kRunEnd = "run_end";         // run, steps, memory, checksum
inline constexpr const char* kWarning = "warning";        // message
inline constexpr const char* kHeartbeat = "heartbeat";
inline constexpr const char* kError = "error";            // run, step, message, backtrace, module, kind
inline constexpr const char* kDone = "done";              // status
inline constexpr const char* kMemorySnapshot = "memory_snapshot";  // run, step, file (CUDA allocator snapshot on OOM)
}  // namespace event

/// One decoded event: its type and the whole JSON object (type included).
struct Event {
  std::string type;
  nlohmann::json body;
  double t = 0;  // seconds since the worker started

  template <typename T>
  T get(const std::string& key, T fallback) const {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    try {
      return it->get<T>();
    } catch (const nlohmann::json::exception&) {
      return fallback;
    }
  }
  bool has(const std::string& key) const { return body.contains(key); }
};

/// Encodes one event as a single line (no embedded newlines) ending in '\n'.
std::string encode_event(const std::string& type, nlohmann::json fields, double t);

/// Decodes one line. Throws ProtocolError naming `where` (e.g.
/// "events.jsonl:12") on invalid JSON, a non-object or a missing "type".
Event decode_event(const std::string& line, const std::string& where);

/// Splits a stream into events. A final line without '\n' is a torn write of
/// a dying worker: it is returned in `torn_tail` and not decoded. Lines that do
/// not decode are collected in `bad_lines` (with their location) and skipped.
struct DecodedStream {
  std::vector<Event> events;
  std::string torn_tail;
  std::vector<std::string> bad_lines;
};
DecodedStream decode_stream(const std::string& text, const std::string& name);

}  // namespace dbh::harness
