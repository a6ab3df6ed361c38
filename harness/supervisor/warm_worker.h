#pragma once

#include <sys/types.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dbh::harness::supervisor {

// Note [A warm worker]: most of a short probe of a Python training is the
// interpreter's start and its imports (6.8 of 8.5 s for a Lightning training
// on a 2-core machine). A command of many probes (bisect, diagnose, qualify)
// opens a WarmWorkers scope; a trial whose command is `python SCRIPT ARGS` or
// `python -m MODULE ARGS` and that may fork (TrialSpec::may_fork: not a
// repeat across processes, a second run in one process, nor a numerics
// variant) is then forked from a warm worker (python/dbh_adapter/_zygote.py),
// one per script or module, working folder and environment apart from dbh's
// own DBH_ variables, started with the first such trial and ended with the
// scope. The warm worker has imported the installed modules the script
// imports at its top level (never the training's own, never CUDA) and forks
// each trial twice, so that it becomes this process's child (this process is
// the subreaper of its descendants) in its own process group, with the
// trial's descriptors, environment, folder and arguments: run_trial waits for
// it, signals its group and reads its exit status as for a worker it started
// itself. Where no warm worker can serve (the adapter is not installed for
// that Python, an import initialised CUDA, it stopped answering) the trial
// starts cold, as every trial does under `--cold`, and the result says which.

/// The Python program and the script or module of a worker command
/// `python SCRIPT ARGS` or `python -m MODULE ARGS` (argv[0] named python,
/// python3 or python3.N, or a path to one); nullopt for any other command,
/// interpreter options before the script included.
struct WarmTarget {
  std::string python;  // argv[0] as written
  std::string script;  // the script, or
  std::string module;  // the module run as -m
  /// sys.argv of the trial: the script (or the module) and its arguments.
  std::vector<std::string> trial_argv;
};
std::optional<WarmTarget> warm_target(const std::vector<std::string>& argv);

/// The environment a warm worker is started with and serves: `env` ("NAME=value"
/// words) without dbh's own DBH_ variables, sorted.
std::vector<std::string> warm_environment(const std::vector<std::string>& env);

/// The request a warm worker reads (docs/worker-protocol.md, "A warm
/// worker"): {"argv": [...], "env": {...}, "cwd": "..."}.
std::string warm_request(const WarmTarget& target, const std::vector<std::string>& env, const std::string& cwd);

/// The trial's pid of a warm worker's reply, or what the reply says went
/// wrong (a reply is the user's environment's: read with bounds).
struct WarmReply {
  pid_t pid = 0;
  std::string error;
};
WarmReply parse_warm_reply(const std::string& text);

class WarmWorker;

/// The warm workers of one command (Note [A warm worker]). One scope at a
/// time per process; a process forked from the one that opened it (a probe
/// run ahead under --jobs) has none, since a trial forked from its warm
/// workers would become the opener's child, not its own.
class WarmWorkers {
 public:
  /// `enabled` false (`--cold`): every trial starts cold.
  explicit WarmWorkers(bool enabled);
  ~WarmWorkers();
  WarmWorkers(const WarmWorkers&) = delete;
  WarmWorkers& operator=(const WarmWorkers&) = delete;

  /// The scope open in this process, or null.
  static WarmWorkers* active();

  /// The warm worker for a trial of `argv` in `cwd` with environment `env`
  /// (worker_environment's words), started if it is not yet; null (and why in
  /// *why) when the trial must start cold. Call it before run_trial notes
  /// this process's children: the warm worker is the command's, not the
  /// trial's.
  WarmWorker* worker_for(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& cwd, std::string* why);

  /// Trials forked from a warm worker and trials started cold by this scope.
  int forked() const { return forked_; }
  void count_fork() { ++forked_; }

  /// Whether a trial of `argv` would be forked from a warm worker (the scope
  /// is not --cold and the command is `python SCRIPT …` or `python -m …`).
  bool serves(const std::vector<std::string>& argv) const { return enabled_ && warm_target(argv).has_value(); }

  /// The longest a warm worker of this scope took to fork its first trial
  /// (its start and imports: what a trial started cold pays again); nullopt
  /// before one has.
  std::optional<double> start_seconds() const;

 private:
  bool enabled_;
  pid_t owner_;
  int forked_ = 0;
  // Keyed by program, target, folder and environment; one that did not
  // start or failed stays, so that its key starts cold from then on.
  std::map<std::string, std::unique_ptr<WarmWorker>> workers_;
};

/// One warm worker process: its socket and process group.
class WarmWorker {
 public:
  WarmWorker(const WarmTarget& target, const std::string& program, const std::vector<std::string>& env,
             const std::string& cwd);
  ~WarmWorker();
  WarmWorker(const WarmWorker&) = delete;
  WarmWorker& operator=(const WarmWorker&) = delete;

  /// Whether it started (else why in error()).
  bool started() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  /// How long its first trial waited for its fork (its start and imports);
  /// nullopt before it forked one.
  std::optional<double> start_seconds() const { return start_seconds_; }

  /// Forks the trial: `fds` become its stdin, stdout, stderr and event pipe.
  /// The trial's pid (this process's child, leading its own process group),
  /// or nullopt with why in *why; a warm worker that failed once serves no
  /// more.
  std::optional<pid_t> fork_trial(const WarmTarget& target, const std::vector<std::string>& env,
                                  const std::string& cwd, const std::array<int, 4>& fds, std::string* why);

 private:
  void stop();
  pid_t pid_ = -1;
  int socket_ = -1;
  int served_ = 0;
  std::optional<double> start_seconds_;
  std::string token_;
  std::string error_;
};

}  // namespace dbh::harness::supervisor
