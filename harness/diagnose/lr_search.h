#pragma once
// Note [The learning rate, searched]: a run that diverged is asked for the
// largest learning rate that trains, not told a tenth of its own. From the
// failing rate the search steps down by decades to the first rate that
// trains (or to its floor: the configuration's own rate when the failing
// command raised it, otherwise six decades down), then halves the decade
// above it (the failing one) until a rate trains: ⌈log10(failing/floor)⌉
// probes and at most three more. The search also stops when three decades
// in a row leave the failure as it was (its class, at its step): a rate a
// thousand times lower that changes nothing says the rate is not what fails
// (a planted fault, a broken sample). Each rate is a probe of the scenario with
// `train.lr` set, so a rate tried before (by an earlier diagnosis or a
// bisection) comes from the probe cache.
//
// What it answers is not what Lightning's learning-rate finder answers (the
// rate where the loss falls fastest over one sweep of growing rates): it is
// the largest rate at which this training, as configured, does not diverge
// through its steps (no non-finite value and no exploded loss: Note [A loss
// that explodes has diverged]). Assumed: a rate that trains keeps training
// when lowered (the search trusts the first decade that trains; a rate
// between two tried ones is not looked at). Pure: no process, no file.

#include <optional>
#include <vector>

namespace dbh::harness::diagnose {

/// Below the failing rate, how far the search looks when the configuration
/// holds no lower rate of its own: six decades (a rate set 10^6 times too
/// high is found).
inline constexpr double kLearningRateDecadesDown = 6;
/// Halvings of the decade above the first rate that trains: 5×, 2.5×, 1.25×.
inline constexpr int kLearningRateHalvings = 3;

/// One rate the search ran and what it did.
struct RateTry {
  enum class Result { kTrains, kFails, kUnknown };
  double rate = 0;
  Result result = Result::kUnknown;
};

class LearningRateSearch {
 public:
  /// `failing`: the rate the run diverged at (> 0). `floor`: the lowest rate
  /// worth trying (0 or not below `failing`: six decades below `failing`).
  /// `budget`: the most probes it asks for.
  LearningRateSearch(double failing, double floor, int budget);

  /// The next rate to run; nullopt once the search has its answer, has
  /// reached its floor, spent its budget or met a rate it could not tell.
  std::optional<double> next() const;
  /// What the rate next() gave did.
  void record(double rate, RateTry::Result result);

  /// The largest rate tried that trained.
  std::optional<double> answer() const;
  double failing() const { return failing_; }
  double floor() const { return floor_; }
  /// Whether the floor itself was tried.
  bool reached_floor() const;
  const std::vector<RateTry>& tries() const { return tries_; }

 private:
  double failing_, floor_;
  int budget_;
  std::vector<RateTry> tries_;
  // The decade phase ends at the first rate that trains (lo) below the last
  // that failed (hi); the halvings then run from hi down.
  std::optional<double> lo_, hi_;
  int halvings_ = 0;
  bool done_ = false;
};

}  // namespace dbh::harness::diagnose
