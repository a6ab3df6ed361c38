#pragma once

#include <string>

#include "harness/supervisor/outcome.h"

namespace dbh::harness::report {

// Note [One metrics.csv]: `dbh run` (from the trial's events, after it ends)
// and `dbh train` (a row as each step ends, to follow while it trains) write
// metrics.csv with these columns and this formatting, so a script reading one
// reads the other:
//   run,step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,
//   rss_bytes,loss_bits,hmean,precision,recall
// `step` is 0-based; the last three are the validation taken after the step
// (empty when none was).

/// The header line, with its newline.
const std::string& metrics_csv_header();
/// The row of `step`, with `eval` the validation taken after it (or none).
std::string metrics_csv_row(const supervisor::StepRecord& step, const supervisor::EvalRecord* eval);

}  // namespace dbh::harness::report
