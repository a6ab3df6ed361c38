#pragma once
// The faults' choice parameters as values: each is an enum whose names
// table, in the enum's order, is the parameter's `allowed` list in the
// catalog (fault_catalog.cc builds the rows from these tables), so an
// injector reads a value with choice_param and never compares a string.

#include <cstddef>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::scenario {

/// unstable_binarization.dtype: the dtype the exp form is evaluated in.
enum class BinarizationDtype { kFloat16, kFloat32 };
/// memory_ballast.on: where the memory is held.
enum class MemorySide { kDevice, kHost };
/// cuda_error.kind: the CUDA or cuDNN error raised.
enum class CudaErrorKind { kCudnnExecutionFailed, kIllegalInstruction, kIllegalMemoryAccess, kCudnnNoEngine, kCudaOom };
/// crash.signal: the signal the worker raises.
enum class CrashSignal { kSegv, kAbrt, kKill, kBus };
/// corrupt_sample.kind: what is broken in the dataset's private copy.
enum class SampleCorruption { kTruncateImage, kZeroByteImage, kNanCoordinate, kDuplicateVertices };
/// wrong_normalisation.kind: how the image reaches the model.
enum class Normalisation { kBlack, kSaturated, kUnnormalised };
/// nan_label.map: the label map poisoned.
enum class LabelMap { kGtShrink, kGtShrinkMask, kGtThresh, kGtThreshMask };

/// Each choice's names, in its enum's order ("float16", "float32"; …).
const std::vector<std::string>& choice_names(BinarizationDtype);
const std::vector<std::string>& choice_names(MemorySide);
const std::vector<std::string>& choice_names(CudaErrorKind);
const std::vector<std::string>& choice_names(CrashSignal);
const std::vector<std::string>& choice_names(SampleCorruption);
const std::vector<std::string>& choice_names(Normalisation);
const std::vector<std::string>& choice_names(LabelMap);

/// A choice's name ("host" for MemorySide::kHost).
template <typename Choice>
const std::string& choice_name(Choice c) {
  return choice_names(Choice{}).at(static_cast<size_t>(c));
}

namespace internal {
/// The position of `f`'s parameter `key` in `names`. A parameter the
/// catalog does not declare, or a value outside `names`, is a logic_error
/// (the fault's code and its catalog entry disagree), never a default.
size_t choice_index(const FaultConfig& f, const std::string& key, const std::vector<std::string>& names);
}  // namespace internal

/// Fault `f`'s choice parameter `key` as its enum.
template <typename Choice>
Choice choice_param(const FaultConfig& f, const std::string& key) {
  return static_cast<Choice>(internal::choice_index(f, key, choice_names(Choice{})));
}

}  // namespace dbh::harness::scenario
