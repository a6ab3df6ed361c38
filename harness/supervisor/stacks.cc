#include "harness/supervisor/stacks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "harness/common/files.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::supervisor::internal {
namespace fs = std::filesystem;

namespace {

// An executable named `name` on this process's PATH, or "" (find_program).
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  return find_program(name, path != nullptr ? std::optional<std::string>(path) : std::nullopt, "/");
}

}  // namespace

std::string capture_stacks(pid_t pid, int fd, double timeout_s) {
  std::vector<std::string> argv;
  std::string tool;
  if (const auto eu = find_on_path("eu-stack"); !eu.empty()) {
    tool = "eu-stack";
    argv = {eu, "-p", std::to_string(pid)};
  } else if (const auto gdb = find_on_path("gdb"); !gdb.empty()) {
    tool = "gdb";
    argv = {gdb, "-p", std::to_string(pid), "-batch", "-nx", "-q", "-ex", "set pagination off",
            "-ex", "thread apply all bt 40"};
  } else {
    return {};
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, STDIN_FILENO);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execv(args[0], args.data());
    _exit(127);
  }
  if (child < 0) return {};
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s ||
        stop_requested() != 0) {
      killpg(child, SIGKILL);
      waitpid(child, &status, 0);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? tool : std::string();
}

}  // namespace dbh::harness::supervisor::internal
