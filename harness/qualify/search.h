#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dbh::harness::qualify {

/// One qualification trial as the search sees it: a setup and what it did.
struct QualifyTrial {
  int64_t batch = 0;
  int64_t accumulation = 1;
  std::string precision;
  bool passed = false;
  std::string outcome;
  std::string klass;  // failure class, "" when passed
  int64_t peak = 0;   // the step peak: the CUDA allocator's on a GPU, the process's on a CPU
  double step_seconds = 0;
  std::vector<std::string> overrides;
  /// CUDA: the memory in use before the allocator (context, libraries), when
  /// the trial's budget event said.
  std::optional<int64_t> context;
};

/// What the search of one precision starts from.
struct PrecisionSearchInput {
  std::string precision;
  int64_t effective = 1;  // batch × accumulation every answer keeps
  int64_t source_batch = 1;
  int64_t source_accumulation = 1;
  std::string source_precision;
  QualifyTrial source;  // the source setup, run first under the full budget (Note [Source first])
  bool source_out_of_memory = false;
  int64_t budget = 0;    // the target's memory
  int64_t margined = 0;  // the budget less the safety margin: what the search fits into
};

/// How the search runs trials: `measure` a micro-batch of `batch` with no
/// accumulation under the margined budget (may be answered from a cache);
/// `confirm` a setup fresh under the full budget.
struct PrecisionSearchTrials {
  std::function<QualifyTrial(int64_t batch)> measure;
  std::function<QualifyTrial(int64_t batch, int64_t accumulation)> confirm;
};

/// One precision's answer.
struct PrecisionSearchResult {
  std::string precision;
  int64_t max_batch = 0;  // the largest micro-batch known to keep the margin; 0: none
  QualifyTrial at_max;    // the trial at max_batch, or the confirmation with the model's peak there
  QualifyTrial confirm;   // the setup recommended for this precision (the last confirmation)
  bool confirmed = false;
  int64_t probes = 0;
  std::string method;  // "affine model" | "binary search" | "affine model missed; binary search" | ""
  std::string how;     // how the batch to confirm was chosen, when not by the method alone
  double bytes_per_sample = 0;
  int64_t fixed_bytes = 0;
  bool max_measured = false;  // a trial ran at max_batch (else the model predicted it)
  int64_t context = 0;        // CUDA: memory in use before the allocator
  std::vector<QualifyTrial> measured;   // every `measure` trial, in order
  std::optional<int64_t> source_need;   // the source's need, predicted when it ran out of memory
};

/// Note [Affine memory model] and Note [The margin holds for the answer]:
/// the largest micro-batch of `in.precision` that trains within the
/// margined budget, confirmed fresh under the full budget with its peak
/// (plus the context) leaving the margin free; the accumulation keeps the
/// effective batch. Pure apart from `trials`: each confirmation runs at most
/// once, and the answer is never above a confirmation that broke the margin.
PrecisionSearchResult search_precision(const PrecisionSearchInput& in, const PrecisionSearchTrials& trials);

}  // namespace dbh::harness::qualify
