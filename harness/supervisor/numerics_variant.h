#pragma once

// Note [Real differences measure the noise]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A numerics reference judges two machines by the noise each measured by
// repeating (Note [A numerics reference], harness/numerics/reference.h). A
// CPU repeats bit for bit, so the processes of a numerics run differ on
// purpose, in the ways that really differ between machines of one kind or
// across a migration: the number of intra-op threads (the order a reduction
// sums in), the CPU instruction set PyTorch dispatches to
// (ATEN_CPU_CAPABILITY: another vector width, another exp and log) and, on
// CUDA, cuDNN's choice of algorithms (benchmark mode toggled). What a
// variant changes is how the training computes, never what it computes: the
// supervisor applies it to the trial (its environment, its thread count, its
// cuDNN mode), and the report names it per process.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::supervisor {

/// The instruction sets PyTorch's CPU kernels dispatch to that this CPU
/// runs, best last: "default", then "avx2" (AVX2 and FMA), then "avx512"
/// (AVX-512 F, BW, DQ and VL), read from /proc/cpuinfo's flags; {"default"}
/// elsewhere.
std::vector<std::string> cpu_capabilities();

/// The variant of process k of a numerics run: as_is, one_thread, then
/// instruction_set (cudnn_algorithms where `cudnn`: dbh's worker on CUDA),
/// in turn.
scenario::NumericsVariant variant_of_process(int64_t process, bool cudnn);

/// What one variant does to a trial.
struct VariantSetting {
  scenario::NumericsVariant variant = scenario::NumericsVariant::kAsIs;  // never kByProcess
  std::vector<std::pair<std::string, std::string>> env;  // set over the inherited environment
  int64_t threads = 0;                                   // intra-op threads; 0 = as configured
  bool toggle_cudnn_benchmark = false;
  std::string description;  // "one intra-op thread", "ATEN_CPU_CAPABILITY=default (not avx512)", …
};

/// The variant `v` of process `process` (by_process: process k takes the
/// k-th of as_is, one_thread, instruction_set, or cudnn_algorithms third
/// where `cudnn` is true: dbh's own worker on CUDA). `capabilities` are
/// cpu_capabilities(), `capability_now` the inherited ATEN_CPU_CAPABILITY
/// ("" when unset: the best). A variant this machine cannot make (one
/// instruction set only; cuDNN without CUDA) is the next that it can. Pure.
VariantSetting variant_setting(scenario::NumericsVariant v, int64_t process, bool cudnn,
                               const std::vector<std::string>& capabilities, const std::string& capability_now);

/// Applies `v` to the scenario a trial runs: its threads, its cuDNN mode and,
/// for an external worker, the variables in worker.env (dbh's own worker
/// gets `v.env` from the trial's environment).
void apply_variant(const VariantSetting& v, scenario::Scenario& s);

}  // namespace dbh::harness::supervisor
