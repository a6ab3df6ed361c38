#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/error.h"
#include "harness/proto/events.h"
#include "harness/proto/worker_link.h"

namespace dbh::harness::supervisor {

/// How to run one worker process.
struct TrialSpec {
  std::vector<std::string> argv;  // argv[0]: the program (a path, or a name looked up in PATH)
  std::string run_dir;            // the worker's folder; stdout.log, stderr.log, events.jsonl end there
  std::string cwd;                // the worker's working directory; "" = ours
  /// Variables set in the worker's environment over ours (kSupervisorPidEnv
  /// is always this process's pid).
  std::vector<std::pair<std::string, std::string>> env;
  double deadline_s = 600;        // wall clock, from spawn
  double silence_s = 120;         // no event for this long → hung
  double grace_s = 5;             // TERM → KILL delay
  /// Before stopping a hung or deadline-exceeded worker, every thread's
  /// stack is written to run_dir/stacks.txt with eu-stack or gdb where one is
  /// installed (Note [Stacks of a hung worker]); at most this long.
  double stacks_timeout_s = 30;
  /// Called for every decoded event as it arrives, heartbeats included; the
  /// trial keeps no events (Note [A trial's events are read as they
  /// arrive]): what a caller needs of them, it reads here.
  std::function<void(const proto::Event&)> on_event;
  /// Note [A warm worker]: whether the trial may be forked from a warm worker
  /// of the command's WarmWorkers scope (an external Python training whose
  /// answer does not depend on a fresh interpreter).
  bool may_fork = false;
};

/// What happened to the process, as the supervisor saw it.
struct TrialResult {
  int exit_code = -1;      // when it exited
  int term_signal = 0;     // when a signal ended it
  bool timed_out = false;  // killed at the deadline
  bool hung = false;       // killed by the silence watchdog
  bool killed_by_supervisor = false;
  bool interrupted = false;  // stopped because the harness was asked to stop
  double seconds = 0;
  std::vector<std::string> bad_lines;  // event lines that did not decode
  std::string torn_tail;               // a last line cut short
  std::string stderr_tail;             // last ~4 KB of stderr
  std::string spawn_error;             // non-empty when the worker never started
  std::string journal_error;           // events.jsonl could not be written (disk full, …)
  int64_t journal_cut_bytes = 0;       // bytes of the stream past kMaxJournalBytes, not journaled
  int64_t stdout_cut_bytes = 0;        // bytes of stdout left out of stdout.log (Note [A worker's logs are bounded])
  int64_t stderr_cut_bytes = 0;        // the same of stderr
  std::string stacks_tool;             // "eu-stack" | "gdb" when stacks were captured
  std::string stacks;                  // their text (bounded), also in run_dir/stacks.txt
  /// Files of the worker's own that bore the name of one of dbh's in the
  /// trial's folder, kept as worker-<name> (Note [dbh's files in a trial]).
  std::vector<std::string> displaced_files;
  /// What the worker left in place of its trial folder when it ended ("a
  /// link to /x", "a file"; "" when the folder was its own): removed, never
  /// written through (Note [dbh's files in a trial]).
  std::string folder_replaced;
  /// Note [A warm worker]: forked from a warm worker, or why a trial that
  /// may fork started cold ("" when it was not to be forked).
  bool forked = false;
  std::string cold_reason;
};

/// Note [A worker's stream is bounded]: a trial's events.jsonl holds at most
/// this many bytes of the worker's stream, and the pipe is drained for at
/// most kDrainSeconds after the worker exits.
inline constexpr size_t kMaxJournalBytes = size_t{256} << 20;
inline constexpr double kDrainSeconds = 2.0;

/// Note [A worker's logs are bounded]: the worker's stdout and stderr reach
/// their logs (stdout.log, stderr.log) through pipes the supervisor reads:
/// each log keeps the first kLogHeadBytes and the last kLogTailBytes of its
/// stream, with a line between them saying how many bytes were left out.
inline constexpr size_t kLogHeadBytes = size_t{4} << 20;
inline constexpr size_t kLogTailBytes = size_t{4} << 20;

/// Spawns the worker in its own process group with the event stream on fd 3
/// and this process's pid in kSupervisorPidEnv, enforces the deadline and the
/// silence watchdog (TERM to the group, grace, KILL), reaps it and returns
/// what happened. Never throws for anything the worker does; a failure to
/// start is reported in `spawn_error`. Call it from a thread that outlives
/// the trial (the commands call it from the main thread): a worker that ran
/// die_with_supervisor() is killed when the thread that spawned it ends.
TrialResult run_trial(const TrialSpec& spec);

/// Asks every running trial to stop (from a signal handler: async-signal-
/// safe). The trial's process group gets TERM, then KILL after the grace.
void request_stop(int signal_number);
/// The signal that requested a stop, or 0.
int stop_requested();

/// Makes SIGINT and SIGTERM call request_stop: every command installs them
/// first, stops its searches when stop_requested() != 0, writes what it has
/// and exits 128 + signal. Idempotent.
void install_stop_handlers();

/// Thrown by a search (the probes of bisect, diagnose, qualify) once a stop
/// was requested, so that the command writes what it has and exits
/// exit_code() (128 + signal).
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal_number);
  int signal_number() const { return signal_; }
  int exit_code() const { return 128 + signal_; }

 private:
  int signal_;
};

}  // namespace dbh::harness::supervisor
