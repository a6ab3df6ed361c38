#pragma once

#include <cstdint>
#include <string>

#include "harness/scenario/fault_choices.h"

namespace dbh::harness::faults {

/// Applies a corrupt_sample fault: copies the dataset at `src` to `dst` and
/// breaks sample `index` (in scan order) as `kind` says, in the copy only (a
/// link out of the copy stops it before a byte is written). Returns the file
/// it broke.
std::string corrupt_dataset_copy(const std::string& src, const std::string& dst, int64_t index,
                                 scenario::SampleCorruption kind);

}  // namespace dbh::harness::faults
