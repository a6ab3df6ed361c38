#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "harness/scenario/scenario.h"
#include "harness/worker/validation.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/train/determinism.h"
#include "model/train/trainer.h"

namespace dbh::harness::worker {

// Note [One training builder]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The worker (`dbh run` and everything built on it), the layout and thread
// measurement (`dbh __tune`) and `dbh train` build the model, the trainer and
// the data from a Scenario here and nowhere else, so a setting means the same
// in each: `dbh train --lr 0.01` is `train.lr=0.01`, with the same bounds,
// defaults and errors (its flags are scenario overrides).

/// An exception's message without the C++ backtrace LibTorch appends to
/// its own errors.
std::string message_of(const std::exception& e);

/// Note [Nothing left to train]: a run resumed from a checkpoint taken at or
/// after its last step (train.last_step(): train.stop_after when it stops
/// earlier, else train.max_steps) trains no step and would end "passed", an
/// answer nobody measured. When the checkpoint's `checkpoint_step` leaves
/// nothing to train: the key that sets the last step, and that step; nullopt
/// when something is left. The worker's input check, the worker's resume and
/// `dbh train --resume` all decide with this.
struct LastStep {
  const char* key;
  int64_t step;
};
std::optional<LastStep> nothing_left_to_train(const scenario::Scenario& s, int64_t checkpoint_step);

/// The intra-op threads a scenario trains with: train.threads when set, else
/// every usable core (what `auto` falls back to when nothing measured it).
int64_t training_threads(const scenario::Scenario& s);

/// Seed, threads and cuDNN switches of the scenario.
model::DeterminismOptions determinism_options(const scenario::Scenario& s);

/// The model of `model.*`, unbuilt.
model::DbNetOptions net_options(const scenario::Scenario& s);

/// Applies determinism_options(s) (the seed first, so the initial weights
/// follow from train.seed) and builds the model of `model.*`.
model::DbNet make_net(const scenario::Scenario& s);

/// The trainer's settings: optimizer, schedule, accumulation, clipping,
/// precision, layout, device and determinism.
model::TrainOptions train_options(const scenario::Scenario& s);

/// What `data.*` trains on, for `root` (data.path, or a private corrupted
/// copy of it). Only for the `real` and `synthetic_render` sources.
model::DatasetOptions dataset_options(const scenario::Scenario& s, const std::string& root);

/// The loader over `dataset` with the scenario's batch size, workers, seed
/// and per-batch validation.
model::LoaderOptions loader_options(const scenario::Scenario& s);

/// Whether data.source reads a Dataset (real files or rendered images)
/// rather than generating synthetic batches itself.
bool uses_dataset(const scenario::Scenario& s);

/// Batches for the trainer: from `loader` when given, else the synthetic
/// source's batch for (train.seed, micro-batch index).
model::BatchSource make_batch_source(const scenario::Scenario& s, std::shared_ptr<model::Loader> loader);

// Note [One training session]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The worker and `dbh train` run the steps with one loop, train_steps: from
// the trainer's next step to train.last_step(), a checkpoint after every
// train.checkpoint_every-th step (named proto::checkpoint_file_name, written
// complete or not at all), and the validation after each step
// validates_after() names (Note [One validation]). What each says about a
// step differs (events on fd 3; a progress line and a row of metrics.csv)
// and is passed in as StepHooks; which steps train, when a checkpoint is
// written and when validation runs is decided here only.

/// What a caller of train_steps says and does around each step; any may be
/// null. An exception from a hook ends the loop (a stop request, a failed
/// write).
struct StepHooks {
  /// Before step `step` trains.
  std::function<void(int64_t step)> before_step;
  /// After a step, before its checkpoint and validation.
  std::function<void(const model::StepResult&)> after_step;
  /// After the checkpoint at `path` was written: the state before step `next`.
  std::function<void(int64_t next, const std::string& path)> checkpointed;
  /// After the validation that follows step `next - 1`.
  std::function<void(int64_t next, const ValidationResult&)> validated;
  /// Last, with the step's validation (null when it had none).
  std::function<void(const model::StepResult&, const ValidationResult*)> step_done;
};

/// Where a session's files go: run `run`'s checkpoints and validation
/// overlays in `dir`, validation faults from `faults` (null: none).
struct SessionSite {
  int64_t run = 0;
  std::string dir;
  faults::FaultInjector* faults = nullptr;
};

/// A checkpoint that could not be written: "PATH: expected a writable file,
/// got an error (…)".
class CheckpointWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The trainer's checkpoint at `path`, written through a temporary name: a
/// checkpoint is complete or absent (a replay resumes from it). Throws
/// CheckpointWriteError.
void save_checkpoint_file(model::Trainer& trainer, const std::string& path);

/// A state monitors.numerics_replay names that this model cannot take (not
/// an archive, another model's): the input's fault, never the training's.
class StateReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Note [The same state, step by step] (harness/numerics/reference.h), at the
/// start of step `step`: with monitors.numerics_save_states, run 0 saves the
/// model's parameters and buffers as `<site.dir>/state-s<step>.pt`; with
/// monitors.numerics_replay, the model takes them from that folder's file of
/// the step when it has one. Throws CheckpointWriteError, or StateReplayError
/// naming the key and the file for a state it cannot take.
void exchange_state(model::DbNet& net, const scenario::Scenario& s, const SessionSite& site, int64_t step);

/// Trains `trainer` (of `net`) on `batches` from its next step to
/// s.train.last_step() (Note [One training session]). Throws what a step,
/// a hook or validation throws, and CheckpointWriteError.
void train_steps(model::DbNet& net, model::Trainer& trainer, const model::BatchSource& batches,
                 const ValidationSet& validation, const scenario::Scenario& s, const SessionSite& site, const StepHooks& hooks);

}  // namespace dbh::harness::worker
