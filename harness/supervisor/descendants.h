#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace dbh::harness::supervisor::internal {

// Note [Every descendant ends with the trial]: the process group holds the
// worker and the children it leaves in it; a descendant that calls setsid()
// or double-forks leaves the group, and killpg no longer reaches it. Each
// trial's processes therefore carry a token of the trial in their
// environment (kTrialTokenEnv, inherited by every descendant that does not
// wipe its environment), and when the trial ends every process of this user
// whose environment holds it is killed. A descendant that also wipes its
// environment is caught another way: this process is the subreaper of its
// descendants (PR_SET_CHILD_SUBREAPER, set before the first worker starts),
// so one that outlives its parent is re-parented here instead of to init,
// and when the trial ends every child of this process that was not its
// child before the trial started is killed and reaped (end_adopted_children).
// Trials of one process run one after another, so every such child is the
// trial's.

/// A token no other trial has: this process, a counter and the time.
std::string new_trial_token();

/// Kills every process (but this one) whose environment holds
/// kTrialTokenEnv=`token`; returns how many.
int kill_token_holders(const std::string& token);

/// Makes this process the subreaper of its descendants, unless it is one
/// already (the setting is the process's own: a process forked from a
/// subreaper is none until it calls this).
void become_subreaper();

/// Initialises `attr` for a worker process (a trial's, a warm worker's):
/// the leader of its own process group, SIGPIPE, SIGTERM and SIGINT at their
/// defaults, no signal blocked. posix_spawnattr_destroy it after the spawn.
void group_leader_attributes(posix_spawnattr_t* attr);

/// The parent of process `pid` as /proc says it, or -1 when it cannot be read.
pid_t parent_of(pid_t pid);

/// The children of this process, as /proc lists their parents.
std::vector<pid_t> children_of_this_process();

/// Kills and reaps every child of this process but those of `before` (the
/// children it had before the trial started: the trial's descendants are
/// re-parented here) until none is left and the trial's group `group` is
/// gone, for at most two seconds (a process in uninterruptible sleep is left
/// to the kernel).
void end_adopted_children(pid_t group, const std::vector<pid_t>& before);

}  // namespace dbh::harness::supervisor::internal
