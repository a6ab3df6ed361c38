#include "harness/diagnose/lr_search.h"

#include <algorithm>
#include <cmath>

namespace dbh::harness::diagnose {

namespace {

// Two rates a search computed are the same rate within rounding.
bool same_rate(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

}  // namespace

LearningRateSearch::LearningRateSearch(double failing, double floor, int budget)
    : failing_(failing),
      floor_(floor > 0 && floor < failing && !same_rate(floor, failing)
                 ? floor
                 : failing / std::pow(10.0, kLearningRateDecadesDown)),
      budget_(budget),
      done_(!(failing > 0) || !std::isfinite(failing) || budget <= 0) {}

std::optional<double> LearningRateSearch::next() const {
  if (done_ || static_cast<int>(tries_.size()) >= budget_) return std::nullopt;
  if (lo_) {
    // Halving the failing decade from its top: the first that trains is the answer.
    if (halvings_ >= kLearningRateHalvings) return std::nullopt;
    const double rate = *hi_ / std::pow(2.0, halvings_ + 1);
    if (rate <= *lo_ || same_rate(rate, *lo_)) return std::nullopt;
    return rate;
  }
  // The next decade down, the floor at the last.
  const double last = tries_.empty() ? failing_ : tries_.back().rate;
  if (same_rate(last, floor_) || last < floor_) return std::nullopt;
  const double rate = last / 10;
  return rate < floor_ || same_rate(rate, floor_) ? floor_ : rate;
}

void LearningRateSearch::record(double rate, RateTry::Result result) {
  tries_.push_back({rate, result});
  if (result == RateTry::Result::kUnknown) {
    done_ = true;  // a rate it cannot tell: the search does not guess past it
    return;
  }
  if (lo_) {
    ++halvings_;
    if (result == RateTry::Result::kTrains) done_ = true;
    return;
  }
  if (result == RateTry::Result::kTrains) {
    lo_ = rate;
    hi_ = tries_.size() >= 2 ? tries_[tries_.size() - 2].rate : failing_;
  }
}

std::optional<double> LearningRateSearch::answer() const {
  std::optional<double> best;
  for (const auto& t : tries_) {
    if (t.result == RateTry::Result::kTrains && (!best || t.rate > *best)) best = t.rate;
  }
  return best;
}

bool LearningRateSearch::reached_floor() const {
  for (const auto& t : tries_) {
    if (same_rate(t.rate, floor_)) return true;
  }
  return false;
}

}  // namespace dbh::harness::diagnose
