#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"

namespace dbh::harness::supervisor {

// Note [Measured choices]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Whether channels-last weights and input make a training step faster, and
// how many intra-op threads do, depends on the CPU (its vector units, its
// caches, whether its cores are hyper-threads), on the GPU, on the model and
// on the input size: on one 2-core EPYC channels-last was 0.83× NCHW's step at
// 640², on another 1.32×. So `train.channels_last` and `train.threads` default
// to `auto`, and dbh measures instead of guessing: before a trial whose
// scenario leaves either to `auto`, the supervisor looks for a measurement of
// this setup in its cache and, when there is none, runs `dbh __tune` as a
// supervised trial of its own (worker/tune.h), which times a few training
// steps of each candidate on synthetic images. The fastest candidate wins
// unless PyTorch's default (NCHW, every core) is within kDefaultMargin of it:
// a tie keeps what users' own PyTorch does.
//
// The cache (<cache_root()>/tuning/<key>.json) is keyed by everything that
// decides the answer and nothing else: the machine (machine_identity()), the
// LibTorch/CUDA libraries (libraries_identity()), the code a step runs
// (kStepCodeDigest: the model, the trainer, the measuring worker, the
// allocator and the compiler flags, digested at build time by
// cmake/step_code_digest.cmake; so a measurement holds across dbh versions
// that did not change that code, and no longer once one did), the device, the encoder,
// decoder and k, the input size, the batch, the precision, and any setting
// the scenario fixed. A lock file serialises measurements of one key, so two
// concurrent dbh processes never time steps against each other and every
// trial of a suite, a bisection or a repeat gets the same choice. Measuring
// happens in its own process so that its memory and threads never count in
// the trial's peak memory or timings; a measurement that fails falls back to
// PyTorch's defaults, is reported, and is not cached. Explicit settings win
// and are never measured.
//
// Note [A measurement to trust]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Timings taken while other processes compete for the cores mislead (two
// threads lose to one when a core is already busy), and a load average
// cannot tell: it counts dbh's own training threads, so a 2-thread run keeps
// its machine "busy" for ever. So the measuring worker reads what other
// processes did meanwhile: the busy CPU time of the CPUs it may run on
// (/proc/stat's cpuN lines within its affinity mask) less its own
// (getrusage), beyond the CPUs its largest candidate leaves free, as
// `others_cores` in its `tuning` event. A measurement
// with more than kMaxOthersCores of others' load (or
// $DBH_TUNE_MAX_OTHERS_CORES) is untrusted: this run uses PyTorch's defaults
// and says so, nothing is cached, and the next run measures again. A
// trusted one decides only by a difference that stands out of the noise:
// the winner must beat the default by kDefaultMargin and by more than either
// candidate's step-to-step spread, else the tie keeps PyTorch's defaults. To
// measure again at any time, remove the cache file the report names.

// Note [A measurement's budget]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A measurement serves speed, so it must cost seconds, not the minutes a
// short run would wait for it: on an H100, seed 003's first step at batch 16,
// 640², ResNet-50 + PAN took 42 s of cuDNN autotuning, for each candidate,
// before a 3-step run. The least measurement warms up and times every
// candidate once. Before any full step, the measuring worker times a batch-1
// step at a quarter of the side (twice: the first warms up) and scales it by
// pixels; on 2 cores that tells in about 4 s that ResNet-50 + PAN's 27 s
// step at 640² is over budget. The least measurement may exceed
// kMeasureBudgetSeconds (or $DBH_TUNE_BUDGET_S; 0 = no budget): when the
// estimate says so four times over (a small step's fixed costs make it
// overstate), or else the first full warm-up step says so, the worker stops
// there. The run takes PyTorch's
// defaults and says why. The verdict is cached like a measurement, so later
// runs of the setup do not pay the step again, when that step had the cores
// to itself (Note [A measurement to trust]: a busy machine slows it); else it
// holds for this run only. A larger budget that would allow the measurement
// measures again; `dbh tune` measures whatever it takes.

/// The seconds a measurement may take, by its least cost (Note [A
/// measurement's budget]).
inline constexpr double kMeasureBudgetSeconds = 10.0;

/// Whether a measurement keeps its budget: a run does; `dbh tune`, asked to
/// measure ahead, measures whatever it takes.
enum class MeasureBudget { kKeep, kIgnore };

/// Cores other processes may keep busy, on average, while the candidates
/// are timed, for the measurement to be trusted.
inline constexpr double kMaxOthersCores = 0.25;

/// How much faster than PyTorch's default (NCHW, every core) a candidate
/// must be to be chosen (and by more than the spread of either's timed steps).
inline constexpr double kDefaultMargin = 0.03;

/// Replaces `auto` in `s.train.channels_last` and `s.train.threads` by
/// measured values (Note [Measured choices]), measuring in `work_dir` (a
/// folder of the trial's; removed after a successful measurement) when the
/// cache has no answer. Returns the record for the report: for each setting
/// its value and source (explicit, measured, cached, default), the
/// candidates' timings, the cache file, when it was measured, and an error
/// when the measurement failed. Null when the scenario has nothing to
/// choose (both settings explicit, `train.mode: ops`, or an external worker). Never throws for
/// anything the measuring worker does or the cache holds. Within one dbh
/// process a setup is resolved once: later calls get the same values
/// (`reused_in_process` in the record). A measurement over its budget
/// (`budget`; Note [A measurement's budget]) leaves PyTorch's defaults, with
/// `over_budget` in the record.
nlohmann::json resolve_measured_choices(scenario::Scenario& s, const std::string& work_dir,
                                        MeasureBudget budget = MeasureBudget::kKeep);

/// The choice among measured candidates (the `candidates` of a `tuning`
/// event): the fastest by its best step, unless the default candidate
/// (`default_channels_last`, `default_threads`: PyTorch's NCHW and every core
/// unless the scenario fixed one of them) is within kDefaultMargin of it or
/// within the spread of either's timed steps (Note [A measurement to trust]).
/// Returns the index into `candidates`, or -1 when none has a timing.
int64_t choose_candidate(const nlohmann::json& candidates, bool default_channels_last, int64_t default_threads);

}  // namespace dbh::harness::supervisor
