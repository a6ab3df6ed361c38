#pragma once

// Note [The same state, step by step] (reference.h): the states a numerics
// reference keeps beside its file R, in the folder `R.states`: one
// `state-s<k>.pt` per step its first process started, as that process's
// worker saved it (monitors.numerics_save_states). The folder is dbh's:
// written whole or not at all, and replaced only when it holds nothing else.

#include <cstdint>
#include <string>
#include <vector>

namespace dbh::harness::numerics {

/// The folder of the states beside the reference `reference`.
std::string states_folder(const std::string& reference);

/// Before a recording: throws UsageError when `states_folder(reference)`
/// exists and is not a folder of states (a link, a file, or a folder holding
/// anything but `state-s<k>.pt` files), naming it.
void check_states_folder(const std::string& reference);

/// The most a reference's states may take on disk together.
inline constexpr int64_t kMaxStatesBytes = int64_t{16} << 30;

/// Moves the states of `steps` from the trial folder `trial_dir` (regular
/// files only, kMaxStatesBytes at most in all) into states_folder(reference),
/// replacing what it held; returns the steps kept, in order: empty when the
/// trial saved none of them or they are over the bound (the folder is then
/// removed: a reference never names stale states).
std::vector<int64_t> keep_states(const std::string& trial_dir, const std::string& reference,
                                 const std::vector<int64_t>& steps);

}  // namespace dbh::harness::numerics
