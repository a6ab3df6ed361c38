#pragma once
// Note [Reading an evaluation]: P/R/H alone leave a user guessing why an
// evaluation scored zero. The reading turns the numbers the evaluation
// measured (detections, the probability maps' statistics, matches) into what
// they mean and what to check next, one finding per case, most telling first.
// Pure: `dbh eval` prints the first line and writes all of them in eval.md
// and eval.html.

#include <cstdint>
#include <string>
#include <vector>

namespace dbh::harness::report {

/// What an evaluation measured, over the whole dataset.
struct EvalFacts {
  int64_t images = 0;
  int64_t gt = 0;        // scorable ground-truth words (don't-care excluded)
  int64_t det = 0;       // detections
  int64_t matched = 0;
  double precision = 0, recall = 0, hmean = 0;
  double max_probability = 0;     // the largest pixel of any image's map
  double mean_text_fraction = 0;  // mean fraction of pixels above the threshold
  double binarize_thresh = 0.3;
  double box_thresh = 0.7;
};

/// One finding: what the numbers mean, then what to check next.
struct EvalFinding {
  std::string id;       // e.g. "saturated_map", stable for tests and JSON
  std::string meaning;
  std::string next;
};

/// The findings for `f`, most telling first; never empty.
std::vector<EvalFinding> read_evaluation(const EvalFacts& f);

}  // namespace dbh::harness::report
