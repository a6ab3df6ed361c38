#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/output_dir.h"
#include "harness/common/progress.h"
#include "harness/proto/events.h"
#include "harness/probe/verdict.h"
#include "harness/common/error.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/machine.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::probe {

/// One probe: an isolated trial of a scenario with extra overrides.
struct ProbeResult {
  int64_t index = 0;
  std::string what;                    // human description ("max_steps=5")
  std::vector<std::string> overrides;  // the probe's own overrides
  Verdict verdict = Verdict::kUnknown;
  supervisor::TrialAnalysis analysis;
  double seconds = 0;
  bool cached = false;
  bool fresh = false;  // run on request, both caches bypassed (re-checks, confirmations)
  std::string hash;    // resolved-scenario hash
  std::string key;     // cache key: scenario, inputs, build and machine
  std::string dir;     // the trial's folder ("" when cached)
  /// When cached from a probe of this session: that probe's folder.
  std::string cached_from;
  /// Run ahead, in a process of its own, while earlier probes ran (Note
  /// [Probes ahead, in parallel]): `dir` is its folder.
  bool parallel = false;
};

/// How a search's probes ran: run rather than answered from the cache, of
/// those run ahead in parallel, and forked from a warm worker (Note [A warm
/// worker]).
struct ProbeCounts {
  int64_t fresh = 0;
  int64_t parallel = 0;
  int64_t forked = 0;
};
ProbeCounts count_probes(const std::vector<ProbeResult>& probes);

/// Whether a failed probe failed before training: no step ended and no step
/// was named (data validation, preflight, model or checkpoint loading).
bool failed_before_training(const supervisor::TrialAnalysis& a);

/// A probe that could not be run or whose trial was ended by the
/// infrastructure rather than by the training: the worker could not start,
/// its journal or events could not be written, or the disk was full. Such a
/// probe is never cached and never counts as "fails"; the search stops and
/// the command exits 2 with this message.
class ProbeInfrastructureError : public ReportError {
 public:
  using ReportError::ReportError;
};

/// Why a trial ended in an infrastructure failure rather than by what it
/// trained ("" when it did not): the worker could not start, the harness
/// stopped it, its events could not be written, or its stderr, error or
/// warnings show a full disk (ENOSPC, EDQUOT, a checkpoint write that failed).
std::string infrastructure_failure(const supervisor::TrialResult& result, const supervisor::TrialAnalysis& analysis);

/// Why `texts` (a worker's stderr, errors, warnings) show a trial stopped by
/// a full disk or quota ("" when they do not): then it is no result.
std::string disk_full_evidence(const std::vector<std::string>& texts);

/// A probe that did not pass while less than this was free on the file
/// system of its folder failed for want of disk: the worker may not even
/// have been able to write why.
inline constexpr int64_t kDiskFullBelowBytes = int64_t{64} << 20;

/// The probe cache's size limit when DBH_PROBE_CACHE_MIB does not set one.
inline constexpr int64_t kDefaultProbeCacheBytes = int64_t{32} << 20;

/// Everything besides the resolved scenario that decides a trial's outcome,
/// as a digest: the files the trial reads (every file of a real dataset
/// folder with its path, size, mtime_ns, ctime_ns and inode, annotation files
/// also by content; model.weights and train.resume_from likewise), missing
/// ones as missing.
std::string input_fingerprint(const scenario::Scenario& s);
/// The dbh build: the running binary and every shared library it mapped
/// (path, size, mtime_ns, ctime_ns, inode), which pins the LibTorch, CUDA and cuDNN it
/// links. Computed once per process.
std::string build_identity();

/// Note [Input manifest]: one list of everything a trial's outcome depends
/// on, from which the probe cache key is computed and whose hash every report
/// shows: the resolved scenario (its includes merged), the datasets (training
/// and validation), weights and checkpoint (input_fingerprint), the knowledge
/// base that classifies failures, an external worker's program, the files
/// and folders its argv names and its source tree (Note [The training's code
/// is an input]), the variables of outcome_variables() that are set
/// (common/environment_vars.h), the build and the machine. Each entry is
/// (what, fingerprint); the files are looked at again on every call.
struct InputManifest {
  std::vector<std::pair<std::string, std::string>> entries;
  /// Why a result of these inputs must not be reused (an external worker's
  /// source tree too large to list: Note [The training's code is an input]);
  /// empty when it may.
  std::string not_cacheable;
  /// A digest of every entry, in order.
  std::string hash() const;
};
InputManifest input_manifest(const scenario::Scenario& s);

/// The probe cache key of `s`: a digest of input_manifest(s) and
/// `environment` (text a caller may add: versions, device).
std::string probe_key(const scenario::Scenario& s, const std::string& environment = "");
/// The same key from inputs already listed.
std::string probe_key(const InputManifest& inputs, const std::string& environment = "");

/// One probe's trial: what it found, and why the infrastructure ended it
/// ("" when it did not: infrastructure_failure, or a full disk under a trial
/// that did not pass).
struct ProbeTrial {
  supervisor::TrialAnalysis analysis;
  std::string infrastructure;
};
/// Runs the probe trial `trial` of `s` on this machine, in `dir`.
ProbeTrial run_probe_trial(const scenario::Scenario& s, const std::string& dir, int64_t trial,
                           const std::function<void(const proto::Event&)>& on_event);

/// The record the probe cache keeps of `p` (its outcome, failure, memory
/// and time, with its key and scenario hash).
nlohmann::json probe_record(const ProbeResult& p);
/// A record as the files of the cache and of a node hold it.
std::string record_text(const nlohmann::json& record);
/// Reads a record of probe_record for `key` at `path` into `p`'s analysis
/// and time; false when it is missing, is not a regular file, is torn, is
/// of another key or format (never a hang: at most `max_bytes` are read).
/// `record`, when given, receives the whole record.
bool read_probe_record(const std::string& path, const std::string& key, ProbeResult* p,
                       size_t max_bytes = size_t{1} << 20, nlohmann::json* record = nullptr);

/// Note [Probes ahead of warm ones]: a probe run ahead is a process forked
/// from this one, so its trial starts cold, while the search's own probes
/// may be forked from a warm worker (Note [A warm worker]). A cold probe
/// ahead pays the worker's start and imports again, on cores the search's
/// own probe needs: it shortens the search only when a probe takes longer
/// than that start. So where the search's probes fork, probes run ahead only
/// once that is measured: the quickest warm probe so far (the first's start
/// taken off) against the warm worker's start. Where the warm worker cannot
/// serve (the search's probes ran and none forked), every probe starts cold
/// and probes run ahead as without one.
struct AheadCosts {
  bool warm = false;                         // the search's own probes are forked from a warm worker
  std::optional<double> warm_probe_seconds;  // the quickest of them, its start taken off
  std::optional<double> start_seconds;       // the warm worker's start: what a probe ahead pays again
};
/// Whether probes run ahead shorten the search; when not, why in *why.
bool ahead_pays(const AheadCosts& c, std::string* why);
/// The costs from a search's probes so far: `forks` whether its trials would
/// be forked from a warm worker, `start_seconds` that worker's start, and
/// `forked_by_scope` the trials its scope forked in all (more than the
/// search's own: another search of the command started it).
AheadCosts ahead_costs(const std::vector<ProbeResult>& history, bool forks, std::optional<double> start_seconds,
                       int64_t forked_by_scope);

struct ClusterOptions;  // cluster.h

/// Runs probes as isolated worker trials (so crashes and sticky CUDA errors
/// cannot stop a search), caches their results by a key that covers the
/// resolved scenario, the files the trial reads, the dbh build and the
/// machine (in memory, and as small JSON files under `cache_dir`, bounded in
/// size) and prints each one as it goes.
///
/// Each Prober owns a folder of its own, `<out_dir>/probes/<session>/`, that
/// no other bisection shares. Checkpoints written by probes are removed as
/// soon as the probe ends, except those of the probe run through
/// probe_keeping_checkpoints() (the reproduction that every replay resumes
/// from), which are removed when the Prober is destroyed unless
/// set_keep_checkpoints(true).
class Prober {
 public:
  /// `checks`: what loading each probe's scenario checks beyond its own
  /// keys (Note [Decode, then check]).
  Prober(std::string scenario_path, std::vector<std::string> base_overrides, std::string out_dir,
         std::string cache_dir, bool quiet, scenario::InputChecks checks);
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  /// Probes the scenario with `extra` overrides on top of the base ones,
  /// answering from the caches when they hold this exact key. A probe fails
  /// when the trial's outcome is a failure; an unresolved trial is kUnknown.
  /// Throws ProbeInfrastructureError, or Interrupted when a stop was
  /// requested.
  ProbeResult probe(const std::vector<std::string>& extra, const std::string& what);
  /// The same, always run (both caches bypassed; the result still updates
  /// them): re-checks, confirmations and repetitions.
  ProbeResult probe_fresh(const std::vector<std::string>& extra, const std::string& what);
  /// A fresh probe whose checkpoints are kept for later probes to resume from.
  ProbeResult probe_keeping_checkpoints(const std::vector<std::string>& extra, const std::string& what);

  /// When a stop was requested (stop_requested() != 0): records the probes
  /// so far, and `in_flight` (the trial the stop cut short), in
  /// `<out_dir>/interrupted.json` and throws Interrupted.
  void stop_if_requested(const ProbeResult* in_flight = nullptr);

  /// Note [Probes ahead, in parallel]: a search that knows which probes it
  /// will ask for next, in order (the halves of a ddmin round after the one
  /// it runs itself), hands them to run_ahead; up to `jobs - 1` of them that
  /// the caches do not hold start at once, each in a process of its own
  /// (forked before the caller's own trial starts, so the caller's trial
  /// counts them as its own children, never as adopted ones to end), with
  /// their own folders (`ahead-<n>`) and trial numbers, quiet. Each stores
  /// its result in the disk cache as any probe does. When the search then
  /// asks for one of them, `probe` waits for its process and answers from
  /// what it stored (`parallel` in the result), so the search decides in the
  /// same order and on the same results as with one job: only the waiting
  /// is shorter. A probe that must run fresh, one whose inputs cannot be
  /// cached, or a Prober without a disk cache never runs ahead. A probe
  /// ahead that fails to store (it stopped, it found an infrastructure
  /// failure) leaves nothing: the search then runs it as usual. The Prober's
  /// end stops every one still running (TERM, as a stop request: each ends
  /// its own trial's process group; then KILL), and each also ends when the
  /// Prober's process dies (PR_SET_PDEATHSIG).
  /// `jobs` 0: default_jobs(the probes' scenario).
  void set_jobs(int64_t jobs);
  int64_t jobs() const { return jobs_; }
  /// `upcoming`: the probes the search will ask for, in order (a probe
  /// running ahead that is no longer among them is stopped: the search has
  /// passed it by); with
  /// Own::kFirstInList the first of them the caches do not answer is the
  /// search's own next probe, so not run ahead.
  /// With Fresh::kYes they run fresh (both caches bypassed) and answer the
  /// search's fresh requests (re-checks, confirmations).
  enum class Own { kNotInList, kFirstInList };
  enum class Fresh { kNo, kYes };
  void run_ahead(const std::vector<std::pair<std::vector<std::string>, std::string>>& upcoming,
                 Own own = Own::kNotInList, Fresh fresh = Fresh::kNo);

  /// Keep the reproduction's checkpoints after the Prober is gone.
  void set_keep_checkpoints(bool keep) { keep_checkpoints_ = keep; }
  /// Counts a trial that ends well but misses the scenario's metric
  /// expectations (`min_hmean`, `loss_drop`, `max_peak_memory`) as failing,
  /// class `metric_expectation_unmet` (bisect config and range).
  void set_judge_metrics(bool judge) { judge_metrics_ = judge; }
  bool keep_checkpoints() const { return keep_checkpoints_; }
  /// Extra text for the cache key, e.g. the torch/CUDA/cuDNN versions and the
  /// device a caller that links LibTorch knows.
  /// Removes the checkpoints and private dataset copies under this Prober's
  /// folder unless they are to be kept. Returns the bytes removed.
  int64_t release_checkpoints();

  const std::vector<ProbeResult>& history() const { return history_; }
  const std::string& scenario_path() const { return scenario_path_; }
  const std::vector<std::string>& base_overrides() const { return base_overrides_; }
  /// This Prober's own folder (created on first use).
  const std::string& session_dir();
  scenario::Scenario load(const std::vector<std::string>& extra) const;
  /// The cache key of `s` now (the files it reads are looked at again).
  std::string cache_key(const scenario::Scenario& s) const;

 private:
  ProbeResult run(const std::vector<std::string>& extra, const std::string& what, bool use_cache,
                  bool keep_checkpoints);
  // Note [Probes on a cluster] (cluster.cc): `p`'s trial run there.
  ProbeTrial run_remotely(const ClusterOptions& cluster, const scenario::Scenario& s, const ProbeResult& p,
                          int64_t trial, ProgressLine* line, const std::function<void(const proto::Event&)>& on_event);
  void store(const ProbeResult& p, const std::string& cache_file);

  std::string scenario_path_;
  std::vector<std::string> base_overrides_;
  scenario::InputChecks checks_;
  std::string out_dir_;
  std::string cache_dir_;
  std::string session_dir_;
  bool quiet_;
  bool said_not_cacheable_ = false;  // the note that probes are not cached, printed once
  bool keep_checkpoints_ = false;
  bool judge_metrics_ = false;
  void release_abandoned_sessions();
  // Probes ahead (ahead.cc): running ones by cache key.
  struct Ahead {
    int pid = 0;
    std::string dir;
  };
  std::map<std::string, Ahead> ahead_;
  std::vector<int> stopping_;  // processes ahead the search passed by, stopped, not yet reaped
  std::map<std::string, std::string> ran_ahead_;  // ended and stored, not yet asked for: key -> folder
  int64_t jobs_ = 1;
  int64_t ahead_started_ = 0;
  int64_t ahead_slot_ = 0;  // in a process run ahead: its number (its folder and trial number)
  bool wait_ahead(const std::string& key, const std::string& what, std::string* dir);
  std::string key_of(const InputManifest& inputs) const;
  static std::string ahead_key(const std::string& key, bool fresh);
  void end_ahead();
  void reap_ahead();
  AheadCosts ahead_costs(const scenario::Scenario& s) const;
  // Note [Probes ahead of warm ones]: why probes ahead wait, said once before and once after it is measured.
  bool said_ahead_unmeasured_ = false;
  bool said_ahead_measured_ = false;

  int64_t cache_cap_bytes_ = kDefaultProbeCacheBytes;
  std::vector<ProbeResult> history_;
  std::map<std::string, ProbeResult> cache_;
  std::vector<std::string> checkpoint_dirs_;  // probes whose checkpoints are kept for now
};

/// Removes the oldest `*.json` results from `cache_dir` until the folder's
/// results take at most `cap_bytes`. Returns the number of files removed.
int64_t trim_probe_cache(const std::string& cache_dir, int64_t cap_bytes);

/// Probes at once when the command line does not say (`--jobs` 0): one on a
/// GPU (two probes would share its memory and its time), else one per two of
/// the CPUs this process may use (a trial's step uses two threads or more),
/// at most 4.
int64_t default_jobs(const scenario::Scenario& s);

/// The frame of a search command (bisect, diagnose, qualify): installs the
/// stop handlers (SIGINT, SIGTERM), runs `body`,
/// which claims its output folder in `claim`; an interruption commits what
/// the search wrote there (the prober keeps its partial answer) and returns
/// 128 + signal; bad input prints "dbh: …" and returns 2. Anything else goes
/// on to main.
int run_search(std::optional<OutputDir>& claim, const std::function<int()>& body);

// Note [A probe never runs in silence]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A probe's line is printed when it ends, and a probe of a large model on a
// CPU takes minutes. While it runs, its progress (the steps done and the
// seconds so far) goes on a ProgressLine (common/progress.h) on stdout at
// each of the worker's events: live on a terminal, a plain line at most every
// 30 s in a log, so a log never goes quiet for longer than a probe's slowest
// step plus that.

/// The progress text of a running probe: "  probe  3  WHAT  running: step
/// 4/12, 23 s" (`steps_done` of `steps_total`; the step part left out before
/// the first step ends).
std::string probe_progress(int64_t index, const std::string& what, int64_t steps_done, int64_t steps_total,
                           double seconds);

}  // namespace dbh::harness::probe
