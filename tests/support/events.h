#pragma once

#include <string>
#include <vector>

#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/proto/event_writer.h"

namespace dbh::testing {

/// An EventWriter whose stream lands in an anonymous in-memory file, read
/// back and decoded on demand: what a worker's monitors and fault injectors
/// emit, seen as the supervisor sees it. Not copyable (owns the file).
class EventCapture {
 public:
  EventCapture();
  ~EventCapture();
  EventCapture(const EventCapture&) = delete;
  EventCapture& operator=(const EventCapture&) = delete;

  harness::proto::EventWriter& writer() { return writer_; }

  /// Every event written so far, in order. A line that does not decode, or a
  /// torn last line, fails the current test.
  std::vector<harness::proto::Event> events() const;

  /// The events of one type, decoded with the protocol's typed reader:
  /// `capture.all(harness::proto::health_from)`.
  template <typename E>
  std::vector<E> all(E (*from)(const harness::proto::Event&)) const {
    std::vector<E> out;
    for (const auto& e : events()) {
      if (e.type == E::kType) out.push_back(from(e));
    }
    return out;
  }

 private:
  int fd_;
  harness::proto::EventWriter writer_;
};

}  // namespace dbh::testing
