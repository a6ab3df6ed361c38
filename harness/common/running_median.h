#pragma once

#include <cstddef>
#include <functional>
#include <queue>
#include <vector>

namespace dbh::harness {

/// The median of every value added so far, kept up to date in O(log n) per
/// value: the loss-spike monitor compares each step's loss with the median of
/// all earlier steps' losses, which sorting the whole history made O(n log n)
/// per step (about 5 ms per step after 100k steps, a few percent of a GPU
/// step).
///
/// `median()` is the upper median, `sorted[size() / 2]` of the values in
/// ascending order (the middle one for an odd count, the larger of the two
/// middle ones for an even count). The two halves: `lower_` (a max-heap)
/// holds the size() / 2 smallest values, `upper_` (a min-heap) the rest, so
/// the median is the smallest of the upper half.
class RunningMedian {
 public:
  void add(double x) {
    if (!upper_.empty() && x < upper_.top()) {
      lower_.push(x);
    } else {
      upper_.push(x);
    }
    const size_t n = size();
    while (lower_.size() > n / 2) {
      upper_.push(lower_.top());
      lower_.pop();
    }
    while (upper_.size() > n - n / 2) {
      lower_.push(upper_.top());
      upper_.pop();
    }
  }
  size_t size() const { return lower_.size() + upper_.size(); }
  bool empty() const { return upper_.empty(); }
  /// Requires !empty().
  double median() const { return upper_.top(); }

 private:
  std::priority_queue<double> lower_;
  std::priority_queue<double, std::vector<double>, std::greater<double>> upper_;
};

}  // namespace dbh::harness
