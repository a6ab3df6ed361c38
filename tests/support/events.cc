#include "tests/support/events.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <gtest/gtest.h>

namespace dbh::testing {

namespace {

int anonymous_file() {
  const int fd = ::memfd_create("dbh-test-events", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  return fd;
}

}  // namespace

EventCapture::EventCapture() : fd_(anonymous_file()), writer_(fd_) {}

EventCapture::~EventCapture() {
  ::close(fd_);
}

std::vector<harness::proto::Event> EventCapture::events() const {
  std::string text;
  char buf[4096];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd_, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  auto decoded = harness::proto::decode_stream(text, "captured events");
  for (const auto& bad : decoded.bad_lines)
    ADD_FAILURE() << "undecodable event line: " << bad;
  if (!decoded.torn_tail.empty()) ADD_FAILURE() << "torn event line: " << decoded.torn_tail;
  return std::move(decoded.events);
}

}  // namespace dbh::testing
