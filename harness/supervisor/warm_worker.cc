#include "harness/supervisor/warm_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <regex>

#include <nlohmann/json.hpp>

#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/proto/worker_link.h"
#include "harness/supervisor/descendants.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::supervisor {
namespace {

// The fd the warm worker reads its socket at (`--socket 3`).
constexpr int kSocketFd = 3;
// How long the first request may wait for the warm worker's imports, and a
// later one for its fork: a warm worker that takes longer serves no more.
constexpr double kFirstReplySeconds = 300;
constexpr double kReplySeconds = 30;
// A reply is a line of JSON: {"pid": N} or {"error": "..."}.
constexpr size_t kMaxReplyBytes = 4096;

WarmWorkers* g_active = nullptr;

bool python_name(const std::string& program) {
  static const std::regex kPython("python(3(\\.[0-9]+)?)?");
  const std::string base = program.substr(program.rfind('/') == std::string::npos ? 0 : program.rfind('/') + 1);
  return std::regex_match(base, kPython);
}

std::string exit_status_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

std::optional<WarmTarget> warm_target(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || !python_name(argv[0])) return std::nullopt;
  WarmTarget t;
  t.python = argv[0];
  size_t args_from = 2;
  if (argv[1] == "-m") {
    if (argv.size() < 3 || argv[2].empty() || argv[2][0] == '-') return std::nullopt;
    t.module = argv[2];
    args_from = 3;
    t.trial_argv.push_back(t.module);
  } else {
    if (argv[1].empty() || argv[1][0] == '-') return std::nullopt;  // interpreter options: cold
    t.script = argv[1];
    t.trial_argv.push_back(t.script);
  }
  t.trial_argv.insert(t.trial_argv.end(), argv.begin() + static_cast<std::ptrdiff_t>(args_from), argv.end());
  return t;
}

std::vector<std::string> warm_environment(const std::vector<std::string>& env) {
  std::vector<std::string> kept;
  for (const auto& e : env) {
    if (e.rfind("DBH_", 0) != 0) kept.push_back(e);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::string warm_request(const WarmTarget& target, const std::vector<std::string>& env, const std::string& cwd) {
  nlohmann::json j;
  j["argv"] = target.trial_argv;
  j["env"] = nlohmann::json::object();
  for (const auto& e : env) {
    const size_t eq = e.find('=');
    if (eq != std::string::npos) j["env"][e.substr(0, eq)] = e.substr(eq + 1);
  }
  j["cwd"] = cwd;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

WarmReply parse_warm_reply(const std::string& text) {
  WarmReply r;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    r.error = "the warm worker's reply is not a JSON object: " + quoted_excerpt(text);
    return r;
  }
  if (const auto e = j.find("error"); e != j.end()) {
    r.error = "the warm worker refused the trial: " +
              (e->is_string() ? quoted_excerpt(e->get<std::string>()) : quoted_excerpt(e->dump()));
    return r;
  }
  const auto p = j.find("pid");
  if (p == j.end() || !p->is_number_integer() || p->get<int64_t>() <= 1 || p->get<int64_t>() > (int64_t{1} << 22)) {
    r.error = "the warm worker's reply has no process id: " + quoted_excerpt(text);
    return r;
  }
  r.pid = static_cast<pid_t>(p->get<int64_t>());
  return r;
}

WarmWorkers::WarmWorkers(bool enabled) : enabled_(enabled), owner_(getpid()) {
  if (g_active == nullptr) g_active = this;
}

WarmWorkers::~WarmWorkers() {
  // A process forked from the opener (a probe run ahead) ends none of the
  // opener's warm workers: their sockets close with it, nothing more.
  if (getpid() != owner_) {
    for (auto& [key, w] : workers_) (void)w.release();
    return;
  }
  workers_.clear();
  if (g_active == this) g_active = nullptr;
}

WarmWorkers* WarmWorkers::active() {
  return g_active != nullptr && g_active->owner_ == getpid() ? g_active : nullptr;
}

std::optional<double> WarmWorkers::start_seconds() const {
  std::optional<double> longest;
  for (const auto& [key, w] : workers_) {
    if (w->start_seconds() && (!longest || *w->start_seconds() > *longest)) longest = w->start_seconds();
  }
  return longest;
}

WarmWorker* WarmWorkers::worker_for(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                    const std::string& cwd, std::string* why) {
  if (!enabled_) {
    *why = "--cold";
    return nullptr;
  }
  const auto target = warm_target(argv);
  if (!target) {
    *why = "the command is not `python SCRIPT …` or `python -m MODULE …`";
    return nullptr;
  }
  const std::string program = find_program(target->python, path_variable(env), cwd);
  if (program.empty()) {
    *why = "no program " + target->python;
    return nullptr;
  }
  const std::vector<std::string> kept = warm_environment(env);
  std::string key = program + '\0' + target->script + '\0' + target->module + '\0' + cwd;
  for (const auto& e : kept) key += '\0' + e;
  auto it = workers_.find(key);
  if (it == workers_.end()) {
    internal::become_subreaper();  // Note [Every descendant ends with the trial]
    it = workers_.emplace(key, std::make_unique<WarmWorker>(*target, program, kept, cwd)).first;
  }
  if (!it->second->started()) {
    *why = it->second->error();
    return nullptr;
  }
  return it->second.get();
}

WarmWorker::WarmWorker(const WarmTarget& target, const std::string& program, const std::vector<std::string>& env,
                       const std::string& cwd) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    error_ = std::string("socketpair: ") + std::strerror(errno);
    return;
  }
  token_ = internal::new_trial_token();
  std::vector<std::string> env_text = env;
  env_text.push_back(std::string(proto::kSupervisorPidEnv) + "=" + std::to_string(getpid()));
  env_text.push_back(std::string(proto::kTrialTokenEnv) + "=" + token_);
  std::vector<std::string> args = {program, "-m", "dbh_adapter._zygote", "--socket", std::to_string(kSocketFd)};
  if (target.module.empty()) {
    args.push_back(target.script);
  } else {
    args.insert(args.end(), {"-m", target.module});
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pair[1], kSocketFd);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawnattr_t attr;
  internal::group_leader_attributes(&attr);
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, &attr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pair[1]);
  if (rc != 0) {
    close(pair[0]);
    error_ = "cannot start the warm worker: " + std::string(std::strerror(rc));
    return;
  }
  pid_ = pid;
  socket_ = pair[0];
}

WarmWorker::~WarmWorker() { stop(); }

void WarmWorker::stop() {
  if (socket_ >= 0) close(socket_);  // its loop ends
  socket_ = -1;
  if (pid_ > 0) {
    killpg(pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    internal::kill_token_holders(token_);
  }
  pid_ = -1;
}

std::optional<pid_t> WarmWorker::fork_trial(const WarmTarget& target, const std::vector<std::string>& env,
                                            const std::string& cwd, const std::array<int, 4>& fds,
                                            std::string* why) {
  const auto fail = [&](const std::string& text) -> std::optional<pid_t> {
    error_ = text;
    *why = text;
    stop();
    return std::nullopt;
  };
  if (pid_ <= 0) return fail(error_.empty() ? "the warm worker is not running" : error_);
  const std::string request = warm_request(target, env, cwd);
  struct iovec iov {
    const_cast<char*>(request.data()), request.size()
  };
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * 4);
  std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * 4);
  if (sendmsg(socket_, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    return fail("the warm worker stopped reading (" + std::string(std::strerror(errno)) + ")");
  }
  // The first reply waits for the warm worker's imports.
  const double limit = served_ == 0 ? kFirstReplySeconds : kReplySeconds;
  const auto asked = std::chrono::steady_clock::now();
  const auto until = asked + std::chrono::duration<double>(limit);
  std::string reply;
  while (true) {
    struct pollfd p {
      socket_, POLLIN, 0
    };
    const int ready = poll(&p, 1, 200);
    if (ready > 0) {
      char buf[kMaxReplyBytes];
      const ssize_t n = recv(socket_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      reply.assign(buf, static_cast<size_t>(n));
      break;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return fail("the warm worker exited (" + exit_status_text(status) + ") before it forked the trial");
    }
    if (stop_requested() != 0) return fail("stopped before the warm worker forked the trial");
    if (std::chrono::steady_clock::now() > until) {
      return fail("the warm worker did not answer in " + std::to_string(static_cast<int>(limit)) + " s");
    }
  }
  if (reply.empty()) {
    // It is exiting: its status says why (2: dbh_adapter is not installed for
    // that Python or too old; 3: an import initialised CUDA).
    int status = 0;
    for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) != pid_; ++i) usleep(10000);
    return fail("the warm worker exited (" + exit_status_text(status) +
                ") before it forked the trial; is dbh_adapter installed for " + target.python + "?");
  }
  const WarmReply r = parse_warm_reply(reply);
  if (!r.error.empty()) return fail(r.error);
  // Note [A warm worker]: the trial must be this process's child, or
  // run_trial could not wait for it.
  if (r.pid == pid_ || internal::parent_of(r.pid) != getpid()) {
    return fail("the warm worker's trial " + std::to_string(r.pid) + " is not this process's child");
  }
  setpgid(r.pid, r.pid);  // as the trial does itself: its group exists before anything signals it
  if (served_ == 0) start_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  ++served_;
  return r.pid;
}

}  // namespace dbh::harness::supervisor
