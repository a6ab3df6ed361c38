#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/proto/event_types.h"

namespace dbh::harness::proto {

/// Writes the worker's event stream: one JSON line per event, written with a
/// single write(2) each so an event is on the pipe before the code that
/// follows it runs (a crash right after `step_begin` still leaves it).
class EventWriter {
 public:
  /// fd < 0 discards events (worker run by hand without a supervisor). A
  /// write that finds the pipe's read end closed (EPIPE: the supervisor is
  /// gone) _exits the process with kSupervisorGoneExit.
  explicit EventWriter(int fd);
  void emit(const std::string& type, nlohmann::json fields = nlohmann::json::object());
  /// Writes one typed event (harness/proto/event_types.h).
  template <typename E, typename = decltype(E::kType)>
  void emit(const E& e) {
    emit(E::kType, to_json(e));
  }
  double elapsed() const;

 private:
  int fd_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dbh::harness::proto
