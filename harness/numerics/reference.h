#pragma once

// Note [A numerics reference]
// "Does it still train the same on the new machine?" is answered against a
// reference a training recorded on the machine it came from: `dbh repeat S
// --processes K --record R` runs K fresh processes with monitors.numerics and
// writes R, per process and step the loss, the gradient norm and every
// observed module's mean absolute output and gradient norm, the parameters'
// checksum and what the machine and its libraries are. `dbh qualify S
// --reference R` runs the same steps, as many times, on this machine and
// compares (compare, pure).
//
// The noise of a quantity at a step is what repeating measured on either
// side: the spread (largest less smallest) of its values across the
// processes, relative to the reference's mean. A CPU repeats bit for bit, so
// the processes of a numerics run differ on purpose (monitors.numerics_jitter,
// NumericsMonitor): from the second on, every module's output moves by 1e-3,
// relative, in a pattern of the process's own, as rounding that differs does
// at every layer; how far that grows over the steps is the training's noise
// (a chaotic training's is wide, a well-conditioned one's narrow). Two sides differ at a step
// when the distance between their ranges exceeds Tolerance::spread_factor
// times the larger spread, and never by less than Tolerance::relative_floor:
// a bit-deterministic CPU repeats with no spread at all, yet another
// instruction set or thread count sums in another order and moves the last
// digits, which is not a different training. A side that is
// nondeterministic widens the noise it is judged with, never produces a
// departure by itself.
//
// Within a step the quantities are read in the order the step computes them:
// each module's output in forward order, the loss, each module's gradient in
// backward order, the gradient norm. The first that differs, at the first
// step where anything does, is where the training departs: "departs at step
// k, first in the output of decoder.fusion, by x where the noise is y".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/event_types.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::numerics {

/// The format a reference file declares (`format`).
inline constexpr const char* kReferenceFormat = "dbh-numerics-reference/1";

/// One run's numbers at one step.
struct StepNumbers {
  int64_t step = 0;
  double loss = 0;
  std::optional<double> grad_norm;
  std::vector<proto::ModuleNumbers> modules;  // forward order; empty when not measured
};

/// One process's first run.
struct RunNumbers {
  std::vector<StepNumbers> steps;
  std::string checksum;  // the parameters' checksum at the run's end; "" when not reported
};

/// What one machine measured: its repeats, and what it is.
struct Side {
  std::vector<RunNumbers> runs;
  nlohmann::json machine = nlohmann::json::object();  // host, CPU, GPUs, libraries, worker, threads
};

/// A recorded reference (the file `--record` writes).
struct Reference {
  std::string scenario;       // the scenario's name
  std::string scenario_hash;  // of the resolved scenario it ran
  std::string recorded_at;    // UTC, ISO 8601
  Side side;
};

nlohmann::ordered_json to_json(const Reference& r);
/// Reads a reference; throws ScenarioError "<file>: <key>: expected …, got …".
Reference reference_from_json(const nlohmann::json& j, const std::string& file);

/// What this machine is, for a side: host, CPU model and cores, the NVIDIA
/// GPUs the driver lists, the variables that steer kernels
/// (ATEN_CPU_CAPABILITY, OMP_NUM_THREADS) and what `a`'s worker said it ran
/// with (its torch, device, threads, an external worker's own stack).
nlohmann::json machine_of(const supervisor::TrialAnalysis& a);

/// The side of `trials` (fresh processes of one scenario: each one's run 0),
/// with `machine` as what it ran on.
Side side_of(const std::vector<const supervisor::TrialAnalysis*>& trials, nlohmann::json machine);

/// How far apart two sides may be and still be the same training.
struct Tolerance {
  double spread_factor = 4;      // the sides differ beyond this many times the larger measured spread
  double relative_floor = 1e-3;  // and never by less than this, relative to the reference
};

/// Where two sides first differ.
struct Departure {
  int64_t step = 0;
  std::string quantity;  // "loss", "gradient norm", "output of M", "gradient of M"
  std::string module;    // M; "" for the loss and the gradient norm
  double reference = 0, here = 0;  // each side's mean
  double by = 0;         // distance between the sides' ranges, relative to the reference
  double noise = 0;      // what it is judged against, relative
};

/// A step of the loss plot: each side's smallest and largest loss, and the
/// band around the reference the other side may lie in.
struct LossPoint {
  int64_t step = 0;
  double reference_lo = 0, reference_hi = 0, here_lo = 0, here_hi = 0, band_lo = 0, band_hi = 0;
};

struct Comparison {
  int64_t steps = 0;                  // steps both sides trained and compared
  int64_t reference_runs = 0, here_runs = 0;
  bool modules_compared = false;      // both sides measured module numbers
  std::optional<Departure> departure;  // none: the same within the noise
  /// The largest distance over what was allowed (< 1 when the same) and
  /// where it was, "step 3, gradient of head.prob.up2".
  double closest = 0;
  std::string closest_at;
  double largest_noise = 0;  // the widest relative noise of any quantity compared
  std::vector<LossPoint> loss;
  std::vector<std::string> notes;  // what was not compared, and why
  /// Why no verdict can be given although both sides trained: the loss's
  /// noise wider than kMaxLossNoise of the loss itself (repeats that disagree
  /// that much, or a reference whose runs do, compare nothing); "" otherwise.
  std::string undecided;
  bool same() const { return !departure && steps > 0 && undecided.empty(); }
};

/// The widest relative noise of the loss at which two sides are still
/// compared (Comparison::undecided).
inline constexpr double kMaxLossNoise = 0.5;

/// Compares `here` with `reference` (Note [A numerics reference]). Pure.
Comparison compare(const Side& reference, const Side& here, const Tolerance& tolerance = {});

/// The verdict in one line: "the same within the noise: …" or "departs at
/// step k, first in …".
std::string verdict_line(const Comparison& c);

}  // namespace dbh::harness::numerics
