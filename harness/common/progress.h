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
#include <string>

namespace dbh::harness {

/// "WHAT: DONE/TOTAL UNIT, S s, about R s left" (the estimate once something
/// is done; "" for UNIT leaves the word out).
std::string progress_text(const std::string& what, const std::string& unit, int64_t done, int64_t total,
                          double seconds);

class Progress {
 public:
  static constexpr double kQuietSeconds = 2.0;
  static constexpr double kPlainEverySeconds = 30.0;

  /// `what` names the step ("dbh data check: decoding the images of
  /// fixtures/real"); `unit` what is counted ("images"). Silent when `quiet`.
  Progress(std::string what, std::string unit, bool quiet = false);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `done` of `total` so far; prints when a line is due.
  void update(int64_t done, int64_t total);
  /// Clears the live line (a terminal), once.
  void finish();

 private:
  std::string what_, unit_;
  bool quiet_ = false, tty_ = false, live_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace dbh::harness
