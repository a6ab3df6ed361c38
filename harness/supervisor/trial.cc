#include "harness/supervisor/trial.h"

#include <algorithm>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial_files.h"

extern char** environ;

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
volatile sig_atomic_t g_stop_signal = 0;
volatile pid_t g_current_group = 0;
}  // namespace

void request_stop(int signal_number) {
  g_stop_signal = signal_number;
  const pid_t group = g_current_group;
  if (group > 0) killpg(group, SIGTERM);
}

int stop_requested() { return g_stop_signal; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  // Restarted system calls: a stop must not turn a report write or a wait
  // into an error; the trial loop's poll() wakes up either way.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

Interrupted::Interrupted(int signal_number)
    : Error("interrupted by " + signal_name(signal_number)), signal_(signal_number) {}

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// An executable named `name` on this process's PATH, or "" (find_program).
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  return find_program(name, path != nullptr ? std::optional<std::string>(path) : std::nullopt, "/");
}

// Note [Stacks of a hung worker]: "hung at step 7" is only half an answer;
// where it hung is the other half. Before the watchdog stops a worker, every
// thread's stack is taken with eu-stack (elfutils) or gdb, whichever is
// installed, into `file`, in a process group of its own with a time limit.
// The worker allowed it with PR_SET_PTRACER (die_with_supervisor). Returns
// the tool used ("" when none is installed or it could not attach).
std::string capture_stacks(pid_t pid, const fs::path& file, double timeout_s) {
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
  const int fd = create_file_no_follow(file.string());
  if (fd < 0) return {};
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
  close(fd);
  if (child < 0) return {};
  const auto t0 = Clock::now();
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (since(t0) > timeout_s || g_stop_signal != 0) {
      killpg(child, SIGKILL);
      waitpid(child, &status, 0);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? tool : std::string();
}

std::string read_tail(const fs::path& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in.tellg());
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string out(size - start, '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

// A descriptor for the trial's file `name` in `dir`, created by this process
// as files.h's Note [Never through a link] says (a link planted at
// main/stdout.log is replaced, not written through), and numbered above
// stderr so that the spawn's dup2 onto 0..2 never meets it. Throws
// ReportError naming the file.
int create_trial_file(const fs::path& dir, const std::string& name) {
  const fs::path file = dir / name;
  int fd = create_file_no_follow(file.string());
  if (fd >= 0 && fd <= STDERR_FILENO) {
    const int high = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    fd = high;
  }
  if (fd < 0) {
    throw ReportError(file.string() + ": expected a file dbh can create, got an error (" + std::strerror(errno) + ")");
  }
  return fd;
}

// Note [A worker's logs are bounded]: one of the worker's output streams
// into its log: the head written as it comes, then a ring of the last
// kLogTailBytes kept in memory and written, after a line saying what was
// left out, when the stream ends.
class BoundedLog {
 public:
  BoundedLog(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  void write(const char* data, size_t n) {
    if (written_ < kLogHeadBytes) {
      const size_t head = std::min(n, kLogHeadBytes - written_);
      if (error_ == 0) error_ = write_all(fd_, data, head);
      written_ += head;
      data += head;
      n -= head;
    }
    if (n == 0) return;
    // Past the head: the ring keeps the last kLogTailBytes.
    if (n >= kLogTailBytes) {
      cut_ += static_cast<int64_t>(tail_.size() + n - kLogTailBytes);
      tail_.assign(data + n - kLogTailBytes, kLogTailBytes);
      return;
    }
    tail_.append(data, n);
    if (tail_.size() > kLogTailBytes) {
      const size_t drop = tail_.size() - kLogTailBytes;
      cut_ += static_cast<int64_t>(drop);
      tail_.erase(0, drop);
    }
  }
  // The tail, after the line that says what was cut; the bytes cut.
  int64_t finish() {
    if (cut_ > 0 && error_ == 0) {
      const std::string line = "\n[dbh: " + std::to_string(cut_) + " bytes of the worker's " + name_ +
                               " left out here; this log keeps its first " + std::to_string(kLogHeadBytes >> 20) +
                               " MiB and its last " + std::to_string(kLogTailBytes >> 20) + " MiB]\n";
      error_ = write_all(fd_, line.data(), line.size());
    }
    if (error_ == 0 && !tail_.empty()) error_ = write_all(fd_, tail_.data(), tail_.size());
    tail_.clear();
    return cut_;
  }

 private:
  int fd_;
  std::string name_;
  size_t written_ = 0;
  int64_t cut_ = 0;
  std::string tail_;
  int error_ = 0;
};

// A pipe whose both ends are numbered above stderr (the spawn's dup2 onto
// 0..2 never meets them), close-on-exec; false when it cannot be made.
bool pipe_above_stderr(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    if (fds[i] > STDERR_FILENO) continue;
    const int high = fcntl(fds[i], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fds[i]);
    fds[i] = high;
  }
  if (fds[0] >= 0 && fds[1] >= 0) return true;
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  return false;
}

// Closes a descriptor when it goes out of scope.
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

namespace {

// The worker's environment: ours, with spec.env and this process as its
// supervisor set over it.
// Note [Every descendant ends with the trial]: the process group holds the
// worker and the children it leaves in it; a descendant that calls setsid()
// or double-forks leaves the group, and killpg no longer reaches it. Each
// trial's processes therefore carry a token of the trial in their
// environment (kTrialTokenEnv, inherited by every descendant that does not
// wipe its environment), and when the trial ends every process of this user
// whose environment holds it is killed.
std::string new_trial_token() {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(now);
}

// Kills every process (but this one) whose environment holds
// kTrialTokenEnv=`token`; returns how many.
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

std::vector<std::string> worker_environment(const TrialSpec& spec, const std::string& token) {
  std::vector<std::pair<std::string, std::string>> set = spec.env;
  set.emplace_back(proto::kSupervisorPidEnv, std::to_string(getpid()));
  set.emplace_back(proto::kTrialTokenEnv, token);
  std::vector<std::string> env_text;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const bool replaced = std::any_of(set.begin(), set.end(), [&](const auto& kv) {
      return std::strncmp(*e, kv.first.c_str(), kv.first.size()) == 0 && (*e)[kv.first.size()] == '=';
    });
    if (!replaced) env_text.emplace_back(*e);
  }
  for (const auto& [name, value] : set) env_text.push_back(name + "=" + value);
  return env_text;
}

// Starts spec.argv as the leader of its own process group, stdin from
// /dev/null, stdout and stderr to the given files, the events pipe at
// kEventsFd, default signal handling and no blocked signals. Returns
// posix_spawn's error (0: *pid is the worker).
int spawn_worker(const TrialSpec& spec, const std::string& token, int out_fd, int err_fd, int events_fd, pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, events_fd, proto::kEventsFd);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);  // the worker leads its own group
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const auto& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_text = worker_environment(spec, token);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  // A program named without a slash ("python") is looked up in the PATH the
  // worker is started with (worker.env's, else ours), as its shell would, and
  // so is the file the input manifest hashes (find_program, Note [dbh owns
  // its names]); the built-in worker is always a path.
  std::optional<std::string> path_var;
  for (const auto& e : env_text) {
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }
  const std::string program = find_program(spec.argv[0], path_var, spec.cwd);
  const int rc = program.empty() ? ENOENT : posix_spawn(pid, program.c_str(), &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace


TrialResult run_trial(const TrialSpec& spec) {
  TrialResult result;
  const fs::path dir(spec.run_dir);
  internal::TrialFiles files(dir);
  // The trial's folder and files: none of them is written through a link
  // someone left in a reused output folder.
  FdCloser out_log, err_log, journal;
  try {
    make_directories_no_follow(spec.run_dir);
    make_directories_no_follow(files.stage().string());
    out_log.fd = create_trial_file(files.stage(), "stdout.log");
    err_log.fd = create_trial_file(files.stage(), "stderr.log");
    journal.fd = create_trial_file(files.stage(), "events.jsonl");
  } catch (const Error& e) {
    result.spawn_error = e.what();
    return result;
  }
  int fds[2], out_pipe[2], err_pipe[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (!pipe_above_stderr(out_pipe)) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (!pipe_above_stderr(err_pipe)) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {fds[0], fds[1], out_pipe[0], out_pipe[1]}) close(fd);
    return result;
  }
  pid_t pid = 0;
  const auto start = Clock::now();
  const std::string token = new_trial_token();
  const int rc = spawn_worker(spec, token, out_pipe[1], err_pipe[1], fds[1], &pid);
  close(fds[1]);
  close(out_pipe[1]);  // the worker has its own copies
  close(err_pipe[1]);
  // Note [A worker's logs are bounded]: the logs are written here, cut.
  BoundedLog logs[2] = {BoundedLog(out_log.fd, "stdout"), BoundedLog(err_log.fd, "stderr")};
  int log_pipes[2] = {out_pipe[0], err_pipe[0]};
  const auto close_logs = [&] {
    for (int& fd : log_pipes) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    result.stdout_cut_bytes = logs[0].finish();
    result.stderr_cut_bytes = logs[1].finish();
    close(out_log.fd);
    out_log.fd = -1;
    close(err_log.fd);
    err_log.fd = -1;
  };
  if (rc != 0) {
    close_logs();
    close(fds[0]);
    close(journal.fd);
    journal.fd = -1;
    files.publish(&result.displaced_files);
    result.spawn_error = "cannot start " + spec.argv[0] + ": " + std::strerror(rc);
    return result;
  }
  g_current_group = pid;
  proto::StreamDecoder decoder("events.jsonl");
  const auto on_decoded = [&](proto::Event&& e) {
    try {
      if (spec.on_event) spec.on_event(e);
    } catch (const std::exception& x) {  // a listener's failure drops its event, as a bad line would
      if (result.bad_lines.size() < proto::kMaxBadLines) result.bad_lines.push_back(truncate_utf8(x.what(), 2000));
    }
  };
  auto last_event = Clock::now();
  bool exited = false;
  int status = 0;
  bool pipe_open = true;
  size_t journaled = 0;
  auto handle_bytes = [&](const char* data, size_t n) {
    // The first failed write ends the journal (a torn record is not
    // continued), as a failed stream stays failed.
    // Note [A worker's stream is bounded]: the journal keeps at most
    // kMaxJournalBytes; what follows is counted, not written.
    if (result.journal_error.empty() && (result.journal_cut_bytes > 0 || journaled + n > kMaxJournalBytes)) {
      result.journal_cut_bytes += static_cast<int64_t>(n);
    } else if (result.journal_error.empty()) {
      journaled += n;
      if (const int err = write_all(journal.fd, data, n); err != 0) {
        result.journal_error = (dir / "events.jsonl").string() + ": expected a writable file, got a write error (" +
                               std::strerror(err) + ")";
      }
    }
    decoder.feed(std::string_view(data, n), on_decoded, result.bad_lines);
    last_event = Clock::now();
  };
  auto kill_group = [&](bool graceful) {
    result.killed_by_supervisor = true;
    if (graceful) {
      killpg(pid, SIGTERM);
      const auto term_at = Clock::now();
      while (since(term_at) < spec.grace_s) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    killpg(pid, SIGKILL);
    if (!exited) {
      waitpid(pid, &status, 0);
      exited = true;
    }
  };
  char buf[65536];
  // One read of a log pipe that poll found ready: into its log; its end
  // (or an error) closes it.
  const auto read_log = [&](int which) {
    const ssize_t got = read(log_pipes[which], buf, sizeof buf);
    if (got > 0) {
      logs[which].write(buf, static_cast<size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(log_pipes[which]);
      log_pipes[which] = -1;
    }
  };
  while (!exited || pipe_open) {
    pollfd p[3] = {{pipe_open ? fds[0] : -1, POLLIN, 0}, {log_pipes[0], POLLIN, 0}, {log_pipes[1], POLLIN, 0}};
    if (poll(p, 3, 100) > 0) {
      if (pipe_open && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t got = read(fds[0], buf, sizeof buf);
        if (got > 0) {
          handle_bytes(buf, static_cast<size_t>(got));
        } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          pipe_open = false;
        }
      }
      for (int which = 0; which < 2; ++which) {
        if (log_pipes[which] >= 0 && (p[1 + which].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_log(which);
      }
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      // Descendants may still hold the pipe: give them a moment, then stop.
      killpg(pid, SIGKILL);
    }
    if (exited && pipe_open) {
      // Drain what is buffered without waiting for stray writers, and for at
      // most kDrainSeconds: a descendant that left the group and keeps writing
      // into the pipe never holds the trial past its end.
      const auto drain_start = Clock::now();
      while (since(drain_start) < kDrainSeconds) {
        pollfd d{fds[0], POLLIN, 0};
        if (poll(&d, 1, 50) <= 0) break;
        const ssize_t got = read(fds[0], buf, sizeof buf);
        if (got <= 0) break;
        handle_bytes(buf, static_cast<size_t>(got));
      }
      pipe_open = false;
    }
    if (!exited) {
      if (g_stop_signal != 0) {
        result.interrupted = true;
        kill_group(true);
      } else if (since(start) > spec.deadline_s || since(last_event) > spec.silence_s) {
        (since(start) > spec.deadline_s ? result.timed_out : result.hung) = true;
        if (spec.stacks_timeout_s > 0) {
          const fs::path stacks = dir / "stacks.txt";
          result.stacks_tool = capture_stacks(pid, stacks, spec.stacks_timeout_s);
          if (!result.stacks_tool.empty()) result.stacks = read_tail(stacks, 256 * 1024);
        }
        kill_group(true);
      }
    }
  }
  close(fds[0]);
  // What the logs' pipes still hold, for at most kDrainSeconds: a
  // descendant that keeps one open never holds the trial past its end.
  const auto drain_logs = Clock::now();
  while ((log_pipes[0] >= 0 || log_pipes[1] >= 0) && since(drain_logs) < kDrainSeconds) {
    pollfd p[2] = {{log_pipes[0], POLLIN, 0}, {log_pipes[1], POLLIN, 0}};
    if (poll(p, 2, 50) <= 0) break;
    for (int which = 0; which < 2; ++which) {
      if (log_pipes[which] >= 0 && (p[which].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_log(which);
    }
  }
  close_logs();
  killpg(pid, SIGKILL);  // nothing of the trial outlives it
  kill_token_holders(token);  // nor what left its group
  g_current_group = 0;
  close(journal.fd);
  journal.fd = -1;
  files.publish(&result.displaced_files);
  // The stop handler TERMs the group itself, so the worker may be gone before
  // the loop above saw the request: a trial that ran into a stop request is
  // interrupted either way.
  if (g_stop_signal != 0) result.interrupted = true;
  result.seconds = since(start);
  result.torn_tail = decoder.pending();
  if (result.journal_cut_bytes > 0) {
    result.bad_lines.push_back("events.jsonl: the stream's last " + std::to_string(result.journal_cut_bytes) +
                               " bytes were read but not journaled (a trial's journal keeps at most " +
                               std::to_string(kMaxJournalBytes) + " bytes)");
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.stderr_tail = read_tail(dir / "stderr.log", 4096);
  return result;
}

}  // namespace dbh::harness::supervisor
