#include "harness/common/progress.h"

#include <unistd.h>

#include <iostream>
#include <sstream>

#include "harness/common/text.h"

namespace dbh::harness {

std::string progress_text(const std::string& what, const std::string& unit, int64_t done, int64_t total,
                          double seconds) {
  std::ostringstream o;
  o << one_line(what) << ": " << done << "/" << total << (unit.empty() ? "" : " " + unit) << ", "
    << static_cast<int64_t>(seconds) << " s";
  if (done > 0 && total > done) {
    const double left = seconds * static_cast<double>(total - done) / static_cast<double>(done);
    o << ", about " << static_cast<int64_t>(left + 0.5) << " s left";
  }
  return o.str();
}

Progress::Progress(std::string what, std::string unit, bool quiet)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      quiet_(quiet),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done, int64_t total) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (seconds < kQuietSeconds) return;
  const double since = std::chrono::duration<double>(now - last_).count();
  if (tty_) {
    if (printed_ && since < 0.2 && done < total) return;
    std::cerr << "\r" << progress_text(what_, unit_, done, total, seconds) << "\x1b[K" << std::flush;
    live_ = true;
  } else {
    if (printed_ && since < kPlainEverySeconds) return;
    std::cerr << progress_text(what_, unit_, done, total, seconds) << std::endl;
  }
  printed_ = true;
  last_ = now;
}

void Progress::finish() {
  if (live_) std::cerr << "\r\x1b[K" << std::flush;
  live_ = false;
}

}  // namespace dbh::harness
