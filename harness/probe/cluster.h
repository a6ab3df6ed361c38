#pragma once

// Note [Probes on a cluster]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// "Will it train on the 12 GB card?" is answered on the 12 GB card. With
// `--executor slurm`, each probe of bisect and diagnose runs as a Slurm job
// step: `srun [--partition P] [--gres gpu:TYPE:1] [--time T] [ARG…] --
// DBH __probe …`, where DBH is this binary (the nodes must see it, and the
// output folder, at the same paths: a shared file system, as for the suites
// of examples/slurm/). On the node, `dbh __probe` resolves the scenario from
// the same file and overrides (and refuses when its hash differs from the
// submitting machine's), supervises the trial there (deadlines, silence,
// process groups, the knowledge base) and writes the probe's result beside
// the trial's folder (`<dir>.result.json`, out of the worker's own folder):
// the record the probe cache keeps, with what the searches read of a probe
// they ran (the monitors' primary finding, an external worker's reads), read
// back within the bounds the supervisor holds a worker to. It relays the
// trial's step and heartbeat events on its stdout, which srun carries back
// to the submitting dbh's event pipe: the progress line moves as a local
// probe's does.
//
// The submitting dbh reads that record as the probe's answer, stores it in
// its cache under a key that names the executor (a result measured on the
// cluster never answers a local probe, nor one on another partition), and
// reports it as any probe. A job that ends without a result (cancelled,
// pre-empted, its node lost, srun killed) is no answer: it is submitted
// again, up to `attempts` times, and then the search stops with exit 2,
// naming srun's last words. A stop request (Ctrl-C, TERM) reaches the step
// through srun, and `scancel --name` ends whatever the cluster still runs of
// it. Probes run ahead under `--jobs` go to the cluster too, each its own
// job step, so the halves of a ddmin round run on as many nodes.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::probe {

/// Where a probe's trial runs.
enum class Executor { kLocal, kSlurm };
inline constexpr const char* kExecutorNames[] = {"local", "slurm"};

/// The `--executor` flags of a search.
struct ClusterOptions {
  Executor executor = Executor::kLocal;
  std::string partition;               // --partition ("": the cluster's default)
  std::string gpu_type;                // --gres=gpu:TYPE:1 ("": no GPU asked for)
  std::string time_limit;              // --time, in Slurm's forms ("": the partition's)
  std::vector<std::string> srun_args;  // further srun options, as written
  int64_t attempts = 3;                // submissions of one probe before the search stops
};

/// The options a search runs with: the command line's, each that it left
/// empty taken from the scenario's `cluster` keys (ClusterConfig). Pure.
ClusterOptions with_scenario_defaults(ClusterOptions o, const scenario::ClusterConfig& c);

/// Checks `o` as the command line gave it; throws UsageError naming the flag.
void check_cluster_options(const ClusterOptions& o);

/// The text that keeps a probe measured on the cluster apart in the cache:
/// "" for local, else the executor and every option that picks the node.
std::string cluster_key_text(const ClusterOptions& o);

/// Where the probes of this process run, for a report: "local", or
/// "slurm" with the options that pick the node ("slurm, partition gpu12").
std::string executor_description();

/// What one probe asks of a node (`dbh __probe`).
struct NodeProbe {
  std::string scenario;                // the scenario file, absolute
  std::vector<std::string> overrides;  // the search's overrides and the probe's own, in order
  std::string dir;                     // the trial's folder, absolute, seen by both machines
  int64_t trial = 0;                   // the trial's number
  std::string key;                     // the probe's cache key on the submitting machine
  std::string hash;                    // the resolved scenario's hash there
};

/// Where the node writes the probe's result: `<dir>.result.json`.
std::string node_result_path(const std::string& dir);

/// `dbh __probe …` for `r`, with `dbh` the binary's path.
std::vector<std::string> node_probe_argv(const std::string& dbh, const NodeProbe& r);

/// The srun command of one attempt: `job` is its job name; `command` runs on
/// the node. Its stdout is the event pipe (fd 3) of the trial that runs it.
std::vector<std::string> srun_argv(const ClusterOptions& o, const std::string& job, const std::string& cwd,
                                   const std::vector<std::string>& command);

/// On the node: resolves, checks and runs the probe `r`, relays its progress
/// on stdout and writes its result (Note [Probes on a cluster]). Returns the
/// process's exit status (0: a result was written).
int run_node_probe(const NodeProbe& r, const scenario::InputChecks& checks);

/// While one lives, the probes of this process (and of those it forks to run
/// ahead) run on the cluster it names; none: locally.
class Cluster {
 public:
  explicit Cluster(ClusterOptions o);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  /// The options of the live scope, or null (local).
  static const ClusterOptions* active();
  /// Completes the live scope's options from the scenario a command loaded
  /// (with_scenario_defaults), before its first probe; none live: nothing.
  static void take_scenario_defaults(const scenario::ClusterConfig& c);

 private:
  ClusterOptions options_;
  ClusterOptions* previous_;
};

/// One probe on the cluster, submitted until a job stores its result.
struct ClusterAttempts {
  int64_t attempts = 0;
  bool stored = false;            // the node wrote a result: `analysis`
  supervisor::TrialAnalysis analysis;
  std::string infrastructure;     // the node found the trial ended by the infrastructure
  supervisor::TrialResult last;   // the last srun, as supervised here
  std::string lost;               // why the last attempt gave no result
};

/// Runs `r` on the cluster `o`: srun in a supervised trial of its own
/// (`<r.dir>.slurm-<attempt>` holds its logs), `deadline_s` from submission,
/// again while a job ends without a result and attempts are left. `say`
/// prints a line (a resubmission); `on_event` sees the relayed events.
ClusterAttempts run_on_cluster(const ClusterOptions& o, const NodeProbe& r, double deadline_s,
                               const std::function<void(const std::string&)>& say,
                               const std::function<void(const proto::Event&)>& on_event);

}  // namespace dbh::harness::probe
