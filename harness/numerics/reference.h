#pragma once

// Note [A numerics reference]
// "Does it still train the same on the new machine?" is answered against a
// reference a training recorded on the machine it came from: `dbh repeat S
// --processes K --record R` runs K fresh processes with monitors.numerics and
// writes R, per process and step the loss, the gradient norm and every
// observed module's mean absolute output and gradient norm, the parameters'
// checksum and what the machine and its libraries are. `dbh qualify S
// --reference R` runs the same steps on this machine and compares (compare,
// pure).
//
// The noise is measured from differences that really occur (Note [Real
// differences measure the noise], harness/supervisor/numerics_variant.h):
// the processes of each side differ in their thread count, their CPU
// instruction set or cuDNN's algorithms, never in what they compute. Two
// sides differ in a quantity when the distance between their ranges
// exceeds Tolerance::spread_factor times the larger spread, and never by
// less than the floor (Tolerance::relative_floor, or the precision's own
// rounding when coarser: tolerance_for).
//
// Note [The same state, step by step]
// A training is chaotic: a difference in the last digit at step 0 grows,
// through the steps' updates, to percents by step 3 (DBNet's hard-negative
// selection and batch norm over small batches amplify it), so trajectories
// compared step by step see only that a change smaller than their spread
// hides. The reference therefore keeps the state its first process started
// every step from (monitors.numerics_save_states: `state-s<k>.pt`, beside R
// in `R.states/`), and here every process starts every step from the
// reference's state (monitors.numerics_replay): a step's numbers are then
// compared from the same parameters, with the noise of one step only, which
// no earlier step has widened. Within a step the quantities are read in the
// order the step computes them: each module's output in forward order, the
// loss, each module's gradient in backward order, the gradient norm. The
// first that differs, at the first step where anything does, is where the
// departure starts: "departs at step k, first in the output of
// decoder.fusion, by x where the noise is y". The free trajectories are
// compared too, on the loss (what the replays cannot see: a step that
// computes alike but updates otherwise, which moves the training away
// beyond its own spread); where no states are available (a reference
// without them, a worker that cannot replay) they are compared on every
// quantity, as far as their spread lets them see.
//
// Both sides' noise of one step counts. The replays here measure this
// machine's; the reference's is measured where its processes shared a
// state, at their first step (they start from the same parameters), and
// each quantity's spread there, relative, bounds its noise from below at
// every step: a kernel that computes differently from run to run widens
// the noise on both sides, so the reference's one process never stands
// alone against a tight cluster of replays.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/event_types.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "model/choices.h"

namespace dbh::harness::numerics {

/// The format a reference file declares (`format`).
inline constexpr const char* kReferenceFormat = "dbh-numerics-reference/1";
/// The folder beside a reference R that holds its states: `R.states`.
inline constexpr const char* kStatesSuffix = ".states";

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
  std::string variant;   // how the process computed ("one intra-op thread"); "" when not said
  /// Note [The layout, held to the reference's]: whether dbh's own worker
  /// trained channels-last; nullopt: not said (an external worker, an
  /// older reference).
  std::optional<bool> channels_last;
};

/// What one machine measured: its repeats, and what it is.
struct Side {
  std::vector<RunNumbers> runs;  // free: each trained from its own state
  /// Note [The same state, step by step]: processes that started every step
  /// from the reference's state (this machine's side only).
  std::vector<RunNumbers> replays;
  nlohmann::json machine = nlohmann::json::object();  // host, CPU, GPUs, libraries, worker, threads
};

/// A recorded reference (the file `--record` writes).
struct Reference {
  std::string scenario;       // the scenario's name
  std::string scenario_hash;  // of the resolved scenario it ran
  std::string recorded_at;    // UTC, ISO 8601
  Side side;
  /// Note [The same state, step by step]: the steps whose state run 0
  /// started from is kept in `<R>.states/state-s<k>.pt`; empty: none kept.
  std::vector<int64_t> state_steps;
};

nlohmann::ordered_json to_json(const Reference& r);
/// Reads a reference; throws ScenarioError "<file>: <key>: expected …, got …".
Reference reference_from_json(const nlohmann::json& j, const std::string& file);

/// What this machine is, for a side: host, CPU model and cores, the NVIDIA
/// GPUs the driver lists, the variables that steer kernels
/// (ATEN_CPU_CAPABILITY, OMP_NUM_THREADS) and what `a`'s worker said it ran
/// with (its torch, device, threads, an external worker's own stack).
nlohmann::json machine_of(const supervisor::TrialAnalysis& a);

/// The numbers of `trials` (fresh processes of `s`: each one's run 0), and
/// the layout each trained with: its measured choice, else the one `s` sets
/// for dbh's own worker (Note [The layout, held to the reference's]).
std::vector<RunNumbers> runs_of(const std::vector<const supervisor::TrialAnalysis*>& trials,
                                const scenario::Scenario& s);

/// How far apart two sides may be and still be the same training.
struct Tolerance {
  double spread_factor = 4;      // the sides differ beyond this many times the larger measured spread
  double relative_floor = 1e-3;  // and never by less than this, relative to the reference
};

/// The tolerance of a training in `precision`: the floor is 1e-3 or the
/// precision's unit roundoff (bf16: 2^-8), whichever is coarser.
Tolerance tolerance_for(model::Precision precision);

/// Where two sides first differ.
struct Departure {
  int64_t step = 0;
  std::string quantity;  // "loss", "gradient norm", "output of M", "gradient of M"
  std::string module;    // M; "" for the loss and the gradient norm
  double reference = 0, here = 0;  // each side's mean
  double by = 0;         // distance between the sides' ranges, relative to the reference
  double noise = 0;      // what it is judged against, relative
  /// Note [The same state, step by step]: found where both sides computed
  /// the step from the same state; false: the free trajectories parted.
  bool same_state = false;
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
  Tolerance tolerance;                // what it was judged with
  int64_t replays = 0;                // processes here that started every step from the reference's state
  int64_t steps_from_same_state = 0;  // steps compared from the same state
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

// Note [The layout, held to the reference's]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// dbh's own worker chooses its memory layout for speed where a scenario
// leaves `train.channels_last` to `auto` (Note [Measured choices],
// supervisor/tuning.h), and the choice is measured per setup: a reference
// recorded with one thread and a run here with two are two setups, and a
// measurement taken while other processes competed keeps PyTorch's default
// for that command only. Channels-last convolutions sum in another order;
// after the first optimizer step (Adam turns a rounding-sized gradient
// into a full-sized update) the free trajectories part by several times
// the spread the processes of one layout show, and the comparison would
// blame the machine for dbh's own choice. So where the scenario here leaves
// the layout to dbh, every process here trains with the layout the
// reference's first run trained with (the run whose states the replays
// start from), and the page says so. A layout the user set is the user's
// training and is compared as it is.

/// The layout the processes here hold to: the reference's first run's,
/// where `layout_auto_here` (this side's scenario leaves it to dbh's own
/// worker) and the reference says it; nullopt otherwise. Pure.
std::optional<bool> layout_to_hold(const Reference& reference, bool layout_auto_here);

}  // namespace dbh::harness::numerics
