#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/proto/events.h"

namespace dbh::harness {

/// How to run one worker process.
struct TrialSpec {
  std::vector<std::string> argv;  // argv[0]: path of the dbh binary
  std::string run_dir;            // stdout.log, stderr.log, events.jsonl go here
  double deadline_s = 600;        // wall clock, from spawn
  double silence_s = 120;         // no event for this long → hung
  double grace_s = 5;             // TERM → KILL delay
  /// Called for every decoded event as it arrives (progress display).
  std::function<void(const Event&)> on_event;
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
  std::vector<Event> events;
  std::vector<std::string> bad_lines;  // event lines that did not decode
  std::string torn_tail;               // a last line cut short
  std::string stderr_tail;             // last ~4 KB of stderr
  std::string spawn_error;             // non-empty when the worker never started
  std::string journal_error;           // events.jsonl could not be written (disk full, …)
};

/// Spawns the worker in its own process group with the event stream on fd 3,
/// enforces the deadline and the silence watchdog (TERM to the group, grace,
/// KILL), reaps it and returns what happened. Never throws for anything the
/// worker does; a failure to start is reported in `spawn_error`.
TrialResult run_trial(const TrialSpec& spec);

/// Asks every running trial to stop (from a signal handler: async-signal-
/// safe). The trial's process group gets TERM, then KILL after the grace.
void request_stop(int signal_number);
/// The signal that requested a stop, or 0.
int stop_requested();

/// The file descriptor number workers write events to.
inline constexpr int kEventsFd = 3;

}  // namespace dbh::harness
