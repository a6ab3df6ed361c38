#pragma once

// A hardware qualification as a value: what `dbh qualify` measured
// (`Qualification`), what it concludes from it (`judge_qualification`, pure)
// and the files it writes (`write_qualification`: the plot, qualification.md,
// .html and .json). qualify_command computes the value with trials, then
// decides, then writes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/numerics/reference.h"
#include "harness/qualify/search.h"

namespace dbh::harness::qualify {

/// Everything a qualification measured and was asked.
struct Qualification {
  // What was asked.
  std::string scenario;                // the scenario's path, as given
  std::vector<std::string> overrides;  // the user's overrides, as given
  std::string scenario_name;
  std::string profile;        // the profile's name; "" for an explicit --budget
  std::string target_name;    // the profile's display name
  std::string target_notes;   // the profile's notes
  int64_t budget = 0;         // the target's memory
  double margin = 0;          // the safety margin, a fraction of the budget
  int64_t margined = 0;       // the budget less the margin: what the searches fit into
  int64_t steps = 0;          // steps each trial trains
  std::string estimate_note;  // why this is a host-memory estimate; "" for an answer
  std::string not_searched;   // a precision the target cannot run, and why; "" when none
  nlohmann::json choices;     // the layout and threads measured for every trial (null: none)
  std::string rerun_command;  // this qualification again, as pasted

  // The source setup, run first under the full budget (Note [Source first]).
  std::string device;
  int64_t size = 0;  // image size (px)
  int64_t encoder = 0;
  std::string decoder;
  int64_t effective = 1;  // batch × accumulation every answer keeps
  QualifyTrial source;
  int64_t source_need = 0;  // measured when it fits, predicted from its precision's line, else 0

  // The searches, one per precision, in the order searched.
  std::vector<std::string> precisions;
  std::vector<PrecisionSearchResult> searches;
  int64_t trial_count = 0;

  /// Every trial the prober ran or answered from its cache, in order.
  struct ProbeRecord {
    std::string what;
    std::string outcome;
    std::string klass;
    int64_t peak_bytes = 0;
    double seconds = 0;
    bool cached = false;
  };
  std::vector<ProbeRecord> history;
  double seconds = 0;  // the qualification's wall time
  /// Where its trials ran: "local", or the cluster (Note [Probes on a cluster]).
  std::string executor = "local";

  bool cuda() const { return device != "cpu"; }
  /// Whether a memory budget was asked (--profile or --budget); without one
  /// only the numerics half is answered.
  bool memory_asked() const { return budget > 0; }

  /// The numerics half (--reference, Note [A numerics reference]): the
  /// reference recorded on the machine the training came from, the same
  /// steps repeated here, and how they compare.
  struct Numerics {
    std::string reference_file;        // as given
    numerics::Reference reference;
    numerics::Side here;
    numerics::Comparison comparison;
    std::string failed_here;           // a run here that did not train to the end: why; "" when none
    std::string rerun_reference;       // the command that records a reference again, as pasted
  };
  std::optional<Numerics> numerics;
};

/// What a qualification concludes.
struct QualificationVerdict {
  /// The recommended precision's search (an index into `searches`): the
  /// source's precision when it was confirmed (the numerics stay as they
  /// were), else the confirmed precision with the highest throughput on this
  /// machine; none when nothing was confirmed.
  std::optional<size_t> best;
  /// The first trial that failed for another reason than memory (a NaN, a
  /// crash), "CLASS at batch B (PRECISION)": whether a batch fits the budget
  /// was then not what was measured. "" when none did.
  std::string other_failure;
  bool memory_asked = true;
  /// The numerics half: none when not asked, else whether this machine
  /// trains the same as the reference within the noise.
  std::optional<bool> numerics_same;

  bool memory_fits() const { return best.has_value(); }
  /// Both halves that were asked hold.
  bool qualifies() const { return (!memory_asked || best.has_value()) && numerics_same.value_or(true); }
  /// The halves that failed, in words ("memory", "numerics", "memory and numerics"); "" when none did.
  std::string failed_halves() const;
};

QualificationVerdict judge_qualification(const Qualification& q);

/// What the target keeps free at `peak` with `r`'s precision: the budget less
/// the allocator's peak and what was in use before it.
int64_t qualification_headroom(const Qualification& q, const PrecisionSearchResult& r, int64_t peak);

/// Writes memory_vs_batch.png, qualification.md, qualification.html and
/// qualification.json into `out` (each atomically).
void write_qualification(const std::filesystem::path& out, const Qualification& q, const QualificationVerdict& v);

/// The verdict's line on the terminal ("QUALIFIES: batch 5 x 3 ...").
std::string qualification_summary(const Qualification& q, const QualificationVerdict& v);

}  // namespace dbh::harness::qualify
