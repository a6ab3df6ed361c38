#pragma once

// The parts the kinds of bisection share, for bisect/'s own files only
// (nothing outside bisect/ includes this): the failure being bisected and
// whether a probe shows it (Signature), how reliably it reproduces
// (Reproduction), the probes of one search (Search), and the answer each kind
// computes (Outputs), which `finish` writes. Each kind is one function over a
// Prober that returns its Outputs:
//   steps, modules  bisect_steps.cc   (replays of a prefix of the run)
//   data            bisect_data.cc    (subsets of the dataset; sample_pool.h: which samples)
//   config, range   bisect_config.cc  (differences between configurations)
// reproduction.cc holds the shared parts, output.cc the files and the
// terminal summary, bisect_command.cc the command that picks a kind.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/bisect/bisect_command.h"
#include "harness/bisect/search.h"
#include "harness/probe/probe.h"

namespace dbh::harness::bisect {

using ojson = nlohmann::ordered_json;

// An answer is "confident" only when it was confirmed by fresh probes, no
// evidence contradicts it and its confidence is at least this.
inline constexpr double kConfidentAt = 0.95;
// The most an answer gets that fresh re-checks did not confirm or that mixed
// evidence contradicts: no better than a coin toss.
inline constexpr double kUnconfirmedCap = 0.5;

/// `dbh run SCENARIO OVERRIDES…` as a shell line, each key once (its last value).
std::string command_line(const std::string& scenario, const std::vector<std::string>& overrides);
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);
std::string list_yaml(const std::vector<int64_t>& v);  // "[1,2,3]"
std::string join(const std::vector<std::string>& v, const std::string& sep);
std::string fixed3(double v);

// ---------------------------------------------------------------------------
// The failure being bisected, and whether a probe shows that same failure.

/// File names (no folders) that `message` names: tokens ending in a known
/// extension, e.g. ".../images/img_003.png: cannot decode" → img_003.png.
std::vector<std::string> files_named(const std::string& message);
/// Module names (of the scenario's model) that `message` names.
std::vector<std::string> modules_named(const std::string& message, model::DecoderKind decoder);

struct Signature {
  std::string klass;
  std::optional<int64_t> step;
  bool check_step = false;  // steps/modules: a replay must fail at the same step
  bool before_training = false;
  std::vector<std::string> files;
  std::vector<std::string> modules;

  std::string text() const;
};

/// Note [One failure identity]: whether a file the message names is the
/// failure's cause for class `klass` (data_invalid), rather than where a
/// symptom showed first.
bool file_is_the_cause(const std::string& klass);
Signature signature_of(const probe::ProbeResult& p, model::DecoderKind decoder, bool check_step);
/// Why the failing probe `p` is not the failure `sig` ("" when it is).
std::string difference(const probe::ProbeResult& p, const Signature& sig);
/// `p`'s verdict against `sig`: a failure of another kind is kDifferent.
probe::Verdict judge(const probe::ProbeResult& p, const Signature& sig);

// ---------------------------------------------------------------------------
// Reproduction: how reliably the failure reproduces, and how many repetitions
// each probe needs so that a passing verdict is wrong with probability <= alpha.

struct Reproduction {
  probe::ProbeResult baseline;  // the failing run most reproduction runs agree with
  probe::ProbeResult source;    // the first run (steps: its checkpoints are replayed)
  Signature sig;
  int64_t runs = 0;
  int64_t failures = 0;   // runs that failed the same way as the baseline
  int64_t different = 0;  // runs that failed another way
  double rate = 0;
  int64_t per_probe = 1;
  bool flaky = false;
  std::vector<std::string> notes;
};

struct ReproducePlan {
  std::vector<std::string> first;  // overrides of the first run
  std::vector<std::string> rest;   // overrides of the others
  bool keep_checkpoints = false;   // the first run's checkpoints are replayed
  bool first_may_be_cached = false;
  bool check_step = false;
};

Reproduction reproduce(probe::Prober& prober, const ReproducePlan& plan, const BisectOptions& o, model::DecoderKind decoder);
/// Probability that no passing verdict hid a failure.
double confidence(const Reproduction& r, int64_t pass_verdicts);

/// The probes of one search, judged against the failure being bisected, with
/// what they showed per configuration (for the mixed-evidence check).
/// The probe a subset of a ddmin stands for: its overrides and its label.
using ProbeOf = std::function<std::pair<std::vector<std::string>, std::string>(const std::vector<size_t>&)>;

class Search {
 public:
  Search(probe::Prober& prober, const Reproduction& rep, Signature sig) : prober_(prober), rep_(rep), sig_(std::move(sig)) {}

  /// The verdict for `extra`: one probe (cached unless `fresh`) for a
  /// deterministic failure; for a flaky one up to per_probe fresh
  /// repetitions, failing at the first that fails the same way.
  probe::Verdict verdict(const std::vector<std::string>& extra, const std::string& what, bool fresh,
                  probe::ProbeResult* last = nullptr);
  /// Configurations whose single runs both passed and failed the same way
  /// although the failure reproduced every time: evidence of flakiness the
  /// reproduction runs did not show.
  std::vector<std::string> contradictions() const;
  /// A ddmin hint that starts each round's probes ahead, beside the one the
  /// search runs itself (Note [Probes ahead, in parallel] in probe/probe.h),
  /// when the Prober has jobs to spare and each verdict is one cached probe
  /// (a deterministic failure: a flaky one's repetitions run fresh); else
  /// none.
  Upcoming ahead(ProbeOf probe_of) const;
  /// Stops the probes run ahead that the search did not need (after a ddmin).
  void nothing_ahead() const { prober_.run_ahead({}); }
  int64_t passes() const { return passes_; }
  const std::vector<std::string>& notes() const { return notes_; }
  const Signature& sig() const { return sig_; }

 private:
  struct Seen {
    std::string what;
    int64_t passes = 0, fails = 0;
  };
  probe::Prober& prober_;
  const Reproduction& rep_;
  Signature sig_;
  std::map<std::string, Seen> seen_;
  int64_t passes_ = 0;
  std::vector<std::string> notes_;
};

/// The step of a checkpoint the worker wrote ("checkpoint-r0-s16.pt" → 16);
/// none for another file.
std::optional<int64_t> checkpoint_step(const std::filesystem::path& file);
/// The checkpoint step `p`'s trial resumed from; none when it started at
/// step 0 or was answered from a cache (it ran nothing).
std::optional<int64_t> resumed_from(const probe::ProbeResult& p);
/// Optimizer steps `p`'s trial executed after it resumed (not the absolute
/// step index): those that ended, and the one a failure cut short. 0 when
/// cached.
int64_t steps_run(const probe::ProbeResult& p);

// ---------------------------------------------------------------------------
// The answer of one kind, and writing it.

struct Outputs {
  BisectKind kind = BisectKind::kSteps;
  ojson result;
  bool found = false;      // an answer was produced
  bool confirmed = false;  // fresh probes confirmed it
  double confidence = 0;
  std::vector<std::string> doubts;  // why the answer is unsure
  Reproduction rep;
  std::string repro;
  std::string summary;               // one paragraph for bisect.md
  std::vector<std::string> details;  // bullet lines
  int64_t answer_step = -1;          // steps: the answer, for modules
  bool replay_from_start = false;    // steps, modules: no checkpoints, every replay from step 0

  bool confident() const { return found && confirmed && doubts.empty() && confidence >= kConfidentAt; }
};

/// Settles the verdict: the confidence of an answer with doubts (unconfirmed,
/// contradicted, mixed) is capped, and one below kConfidentAt is a doubt.
void conclude(Outputs& o, double base_confidence);
/// Writes bisect.json, bisect.md and bisect.html under `out` and the summary
/// on stdout; returns the exit code (0 for a confident answer, else 1).
int finish(const Outputs& o, const probe::Prober& prober, const std::filesystem::path& out, double seconds,
           int64_t removed_bytes);

// ---------------------------------------------------------------------------
// The kinds.

Outputs bisect_steps(probe::Prober& prober, const BisectOptions& o);
Outputs bisect_modules(probe::Prober& prober, const BisectOptions& o);
Outputs bisect_data(probe::Prober& prober, const BisectOptions& o);
/// config builds its own prober (for the good configuration) into `prober`.
Outputs bisect_config(const BisectOptions& o, std::unique_ptr<probe::Prober>& prober, const std::filesystem::path& out_dir);
Outputs bisect_range(probe::Prober& prober, const BisectOptions& o);

}  // namespace dbh::harness::bisect
