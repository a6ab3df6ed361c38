#pragma once
// Note [No silent minute]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A step that can take more than a few seconds (a dataset's images decoded
// one by one, say) says what it does and how long it expects: after its
// first kQuietSeconds, a terminal shows one live line on stderr, rewritten as
// it goes; a log (stderr not a terminal) gets a plain line then and every
// kPlainEverySeconds after. A step that ends sooner prints nothing. stderr,
// so that a command's stdout (JSON, a table) stays what it promises.

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace dbh::harness {

/// "WHAT: DONE/TOTAL UNIT, S s, about R s left" (the estimate once something
/// is done; "" for UNIT leaves the word out).
std::string progress_text(const std::string& what, const std::string& unit, int64_t done, int64_t total,
                          double seconds);

/// One progress line on `out`: nothing during its first `quiet_seconds`;
/// then, when `out` is a terminal (`tty`), one live line rewritten at most
/// every 0.2 s, else a plain line at most every kPlainEverySeconds.
class ProgressLine {
 public:
  static constexpr double kPlainEverySeconds = 30.0;

  ProgressLine(std::ostream& out, bool tty, double quiet_seconds);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  /// Shows `text` when a line is due; `last` (the final state) is shown on a
  /// terminal whatever the rate.
  void show(const std::string& text, bool last = false);
  /// Seconds since the line was made.
  double seconds() const;
  /// Clears the live line (a terminal), once.
  void finish();

 private:
  std::ostream& out_;
  bool tty_ = false, live_ = false, printed_ = false;
  double quiet_seconds_ = 0;
  std::chrono::steady_clock::time_point start_, last_;
};

/// A counted step on stderr (Note [No silent minute]): progress_text() on a
/// ProgressLine that stays quiet for its first kQuietSeconds.
class Progress {
 public:
  static constexpr double kQuietSeconds = 2.0;

  /// `what` names the step ("dbh data check: decoding the images of
  /// fixtures/real"); `unit` what is counted ("images").
  Progress(std::string what, std::string unit);

  /// `done` of `total` so far; prints when a line is due.
  void update(int64_t done, int64_t total);
  void finish() { line_.finish(); }

 private:
  std::string what_, unit_;
  ProgressLine line_;
};

}  // namespace dbh::harness
