#include "harness/proto/event_writer.h"

#include <unistd.h>

#include <cerrno>

#include "harness/proto/events.h"
#include "harness/proto/worker_link.h"

namespace dbh::harness::proto {

EventWriter::EventWriter(int fd) : fd_(fd), start_(std::chrono::steady_clock::now()) {}

double EventWriter::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void EventWriter::emit(const std::string& type, nlohmann::json fields) {
  const std::string line = encode_event(type, std::move(fields), elapsed());
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The read end is closed: the supervisor is gone, and a worker never
      // outlives it (SIGPIPE, when not ignored, has already ended it here).
      if (errno == EPIPE) _exit(kSupervisorGoneExit);
      return;  // not a pipe to a supervisor (a worker run by hand): drop it
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace dbh::harness::proto
