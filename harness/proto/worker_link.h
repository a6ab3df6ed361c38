#pragma once

// The link between a supervisor and its worker process, as both ends see it:
// the events on fd 3 (event_writer.h, events.h), the supervisor's pid in the
// environment, the exit status of a worker that finds its supervisor gone.

namespace dbh::harness::proto {

/// The file descriptor number workers write events to.
inline constexpr int kEventsFd = 3;

/// The environment variable run_trial sets to the supervisor's pid.
inline constexpr const char* kSupervisorPidEnv = "DBH_SUPERVISOR_PID";

/// The environment variable run_trial sets to a token of its own per trial:
/// every process that keeps it (a descendant that left the process group, a
/// daemon that called setsid) is the trial's, and ends with it (Note [Every
/// descendant ends with the trial], supervisor/trial.cc).
inline constexpr const char* kTrialTokenEnv = "DBH_TRIAL_TOKEN";

/// What a worker exits with when it finds its supervisor gone (the status
/// the parent-death SIGKILL would have given it).
inline constexpr int kSupervisorGoneExit = 128 + 9;

/// Called first thing in a worker: the kernel kills the worker (SIGKILL) when
/// the supervisor's spawning thread ends, whatever way (PR_SET_PDEATHSIG),
/// and the worker _exits with kSupervisorGoneExit at once when its parent is
/// no longer the supervisor named by kSupervisorPidEnv (it died before the
/// worker got here). Does nothing without that variable (a worker started by
/// hand).
void die_with_supervisor();

}  // namespace dbh::harness::proto
