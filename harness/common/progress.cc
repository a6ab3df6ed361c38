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

ProgressLine::ProgressLine(std::ostream& out, bool tty, double quiet_seconds)
    : out_(out), tty_(tty), quiet_seconds_(quiet_seconds), start_(std::chrono::steady_clock::now()), last_(start_) {}

ProgressLine::~ProgressLine() { finish(); }

double ProgressLine::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::show(const std::string& text, bool last) {
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - start_).count() < quiet_seconds_) return;
  const double since = std::chrono::duration<double>(now - last_).count();
  if (tty_) {
    if (printed_ && since < 0.2 && !last) return;
    out_ << "\r" << text << "\x1b[K" << std::flush;
    live_ = true;
  } else {
    if (printed_ && since < kPlainEverySeconds) return;
    out_ << text << std::endl;
  }
  printed_ = true;
  last_ = now;
}

void ProgressLine::finish() {
  if (live_) out_ << "\r\x1b[K" << std::flush;
  live_ = false;
}

Progress::Progress(std::string what, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), line_(std::cerr, isatty(STDERR_FILENO) != 0, kQuietSeconds) {}

void Progress::update(int64_t done, int64_t total) {
  line_.show(progress_text(what_, unit_, done, total, line_.seconds()), done >= total);
}

}  // namespace dbh::harness
