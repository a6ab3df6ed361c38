#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/faults/injectors.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/scenario.h"
#include "model/data/annotation.h"
#include "model/dbnet.h"

namespace dbh::harness::worker {

// Note [One validation]: validation during training (train.eval_every) is
// one piece of code for the worker, which emits each as an `eval` event, and
// for `dbh train`, which prints it and fills metrics.csv's last columns: the
// same images, cadence, settings and numbers.

/// The images validated: those of data.val.path, or the samples held out
/// of the training dataset (data.val.holdout, which the worker opens).
struct ValidationSet {
  std::string root;
  std::vector<model::ImageAnnotation> images;
};

/// data.val.path: its images, read under the training set's policy
/// (data.on_invalid): an image it cannot read (a FIFO, a device, a cut file)
/// fails the run under `error` (model::DataError), and is a warning under
/// skip or clip (appended to `warnings`), never dropped in silence.
ValidationSet open_validation_set(const scenario::Scenario& s, std::vector<std::string>& warnings);

/// Whether a validation follows the step that made `next` steps done: every
/// train.eval_every steps and after the last step (train.last_step()), when
/// there are images to validate on.
bool validates_after(const scenario::Scenario& s, const ValidationSet& v, int64_t next);

struct ValidationResult {
  proto::Eval eval;                    // the `eval` event's fields
  /// The last validation's overlays of the worst images (data.val.overlays),
  /// relative to the folder given; `drew_overlays` when they were drawn.
  bool drew_overlays = false;
  std::vector<std::string> overlays;
};

/// Evaluates `net` after `step` steps of run `run` (training mode restored).
/// At the last validation (`last`) with data.val.overlays, writes overlays of
/// the worst images under `dir`/eval-overlays. `faults` (may be null) may
/// change the post-processing settings (on_validation).
ValidationResult validate(model::DbNet& net, const scenario::Scenario& s, const ValidationSet& v, int64_t run, int64_t step,
                          bool last, const std::filesystem::path& dir, faults::FaultInjector* faults);

}  // namespace dbh::harness::worker
