#include "harness/supervisor/descendants.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/proto/worker_link.h"

namespace dbh::harness::supervisor::internal {
namespace fs = std::filesystem;

std::string new_trial_token() {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(now);
}

int kill_token_holders(const std::string& token) {
  const std::string needle = std::string(proto::kTrialTokenEnv) + "=" + token;
  int killed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == getpid()) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    if (!in) continue;  // gone, or another user's
    std::string var;
    while (std::getline(in, var, '\0')) {
      if (var == needle) {
        kill(pid, SIGKILL);
        ++killed;
        break;
      }
    }
  }
  return killed;
}

pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return -1;
  // "pid (comm) state ppid …": comm may hold spaces and parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  char state = 0;
  long ppid = -1;
  if (!(rest >> state >> ppid)) return -1;
  return static_cast<pid_t>(ppid);
}

std::vector<pid_t> children_of_this_process() {
  std::vector<pid_t> children;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 9 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (parent_of(pid) == self) children.push_back(pid);
  }
  return children;
}

void end_adopted_children(pid_t group, const std::vector<pid_t>& before) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (true) {
    std::vector<pid_t> children = children_of_this_process();
    children.erase(std::remove_if(children.begin(), children.end(),
                                  [&](pid_t c) { return std::find(before.begin(), before.end(), c) != before.end(); }),
                   children.end());
    for (const pid_t child : children) kill(child, SIGKILL);
    for (const pid_t child : children) waitpid(child, nullptr, WNOHANG);
    const bool group_left = group > 0 && kill(-group, 0) == 0;
    if ((children.empty() && !group_left) || std::chrono::steady_clock::now() > until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void group_leader_attributes(posix_spawnattr_t* attr) {
  posix_spawnattr_init(attr);
  posix_spawnattr_setpgroup(attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
}

void become_subreaper() {
  // Asked of the kernel each time rather than remembered: the setting is not
  // inherited across fork(), and a process forked from a supervisor (a probe
  // run ahead, --jobs) runs trials of its own, whose orphans must come back to
  // it rather than to the process it was forked from.
  int is = 0;
  if (prctl(PR_GET_CHILD_SUBREAPER, &is) == 0 && is != 0) return;
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

}  // namespace dbh::harness::supervisor::internal
