#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace dbh::harness::supervisor::internal {

/// Note [Stacks of a hung worker]: "hung at step 7" is only half an answer;
/// where it hung is the other half. Before the watchdog stops a worker, every
/// thread's stack is taken with eu-stack (elfutils) or gdb, whichever is
/// installed, into the open file `fd` (dbh's own, Note [dbh's files in a
/// trial]), in a process group of its own with a time limit
/// (and not past a stop request). The worker allowed it with
/// PR_SET_PTRACER (die_with_supervisor). Returns the tool used ("" when
/// none is installed or it could not attach).
std::string capture_stacks(pid_t pid, int fd, double timeout_s);

}  // namespace dbh::harness::supervisor::internal
