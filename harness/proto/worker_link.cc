#include "harness/proto/worker_link.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

namespace dbh::harness::proto {

void die_with_supervisor() {
  const char* text = std::getenv(kSupervisorPidEnv);
  if (text == nullptr || *text == '\0') return;
  // From here on the kernel kills this process when the supervisor's
  // spawning thread ends, however it ends (SIGKILL included).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Let the supervisor's debugger child read this process's stacks when it
  // hangs (Yama's ptrace_scope 1 allows only ancestors otherwise).
  if (const long sup = std::strtol(text, nullptr, 10); sup > 0) prctl(PR_SET_PTRACER, sup, 0, 0, 0);
  // The supervisor may have died before the line above: then this process
  // was already handed to another parent and no signal will come.
  char* end = nullptr;
  const long expected = std::strtol(text, &end, 10);
  if (end != text && *end == '\0' && expected > 0 && getppid() != static_cast<pid_t>(expected)) {
    _exit(kSupervisorGoneExit);
  }
}

}  // namespace dbh::harness::proto
