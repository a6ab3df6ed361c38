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
#include <sstream>
#include <thread>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/supervisor/descendants.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/stacks.h"
#include "harness/supervisor/trial_files.h"
#include "harness/supervisor/warm_worker.h"

extern char** environ;

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;
using namespace internal;  // descendants.h
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

// The last `max_bytes` of the file `fd` holds.
std::string read_tail(int fd, size_t max_bytes) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) return {};
  const auto size = static_cast<size_t>(st.st_size);
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  std::string out(size - start, '\0');
  const ssize_t got = pread(fd, out.data(), out.size(), static_cast<off_t>(start));
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return out;
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


}  // namespace

namespace {

// The worker's environment: ours, with spec.env and this process as its
// supervisor set over it.
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
  become_subreaper();  // Note [Every descendant ends with the trial]: orphans come back here
  posix_spawnattr_t attr;
  group_leader_attributes(&attr);  // the worker leads its own group
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
  const std::string program = find_program(spec.argv[0], path_variable(env_text), spec.cwd);
  const int rc = program.empty() ? ENOENT : posix_spawn(pid, program.c_str(), &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace


namespace {

// One trial under supervision (Note [A worker's logs are bounded], Note [A
// worker's stream is bounded]): the worker's three pipes read as they fill,
// its deadlines and the stop request checked between reads, and its group
// ended with it. run_trial drives the steps in order.
class Supervision {
 public:
  Supervision(const TrialSpec& spec, TrialResult& result) : spec_(spec), result_(result), dir_(spec.run_dir), files_(dir_) {}

  // The trial's folder and files: none of them is written through a link
  // someone left in a reused output folder. False (spawn_error set) when
  // they cannot be made.
  bool open_files() {
    try {
      files_.make_folder();
      out_log_ = files_.create("stdout.log");
      err_log_ = files_.create("stderr.log");
      journal_ = files_.create("events.jsonl");
    } catch (const Error& e) {
      result_.spawn_error = e.what();
      return false;
    }
    return true;
  }

  // The event pipe and the two log pipes. False (spawn_error set, nothing
  // left open) when the system refuses one.
  bool open_pipes() {
    if (pipe2(events_, O_CLOEXEC) != 0) {
      result_.spawn_error = std::string("pipe: ") + std::strerror(errno);
      return false;
    }
    if (!pipe_above_stderr(out_pipe_)) {
      result_.spawn_error = std::string("pipe: ") + std::strerror(errno);
      for (int fd : events_) close(fd);
      return false;
    }
    if (!pipe_above_stderr(err_pipe_)) {
      result_.spawn_error = std::string("pipe: ") + std::strerror(errno);
      for (int fd : {events_[0], events_[1], out_pipe_[0], out_pipe_[1]}) close(fd);
      return false;
    }
    return true;
  }

  // Starts the worker; false (spawn_error set, the trial's files published)
  // when it could not start.
  bool spawn() {
    start_ = Clock::now();
    token_ = new_trial_token();
    // Note [A warm worker]: started (when it is the first such trial) before
    // this process's children are noted: it is the command's, not the trial's.
    WarmWorkers* scope = spec_.may_fork ? WarmWorkers::active() : nullptr;
    WarmWorker* warm = nullptr;
    std::string cwd = spec_.cwd;
    std::vector<std::string> env_text;
    if (scope != nullptr) {
      std::error_code ec;
      if (cwd.empty()) cwd = fs::current_path(ec).string();
      env_text = worker_environment(spec_, token_);
      warm = cwd.empty() ? nullptr : scope->worker_for(spec_.argv, env_text, cwd, &result_.cold_reason);
    }
    children_before_ = children_of_this_process();  // not the trial's: never ended by it
    int rc = -1;
    if (warm != nullptr) {
      const int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
      const auto pid = warm->fork_trial(*warm_target(spec_.argv), env_text, cwd,
                                        {null_in, out_pipe_[1], err_pipe_[1], events_[1]}, &result_.cold_reason);
      if (null_in >= 0) close(null_in);
      if (pid) {
        pid_ = *pid;
        rc = 0;
        result_.forked = true;
        result_.cold_reason.clear();
        scope->count_fork();
      }
    }
    if (rc != 0) rc = spawn_worker(spec_, token_, out_pipe_[1], err_pipe_[1], events_[1], &pid_);
    last_event_ = Clock::now();
    close(events_[1]);
    close(out_pipe_[1]);  // the worker has its own copies
    close(err_pipe_[1]);
    log_pipes_[0] = out_pipe_[0];
    log_pipes_[1] = err_pipe_[0];
    logs_[0] = BoundedLog(out_log_, "stdout");
    logs_[1] = BoundedLog(err_log_, "stderr");
    if (rc == 0) {
      g_current_group = pid_;
      return true;
    }
    close_logs();
    close(events_[0]);
    publish_files();
    result_.spawn_error = "cannot start " + spec_.argv[0] + ": " + std::strerror(rc);
    return false;
  }

  // Until the worker has exited and its event pipe is closed: reads what
  // arrives, then checks the stop request and the deadlines.
  void watch() {
    while (!exited_ || pipe_open_) {
      poll_pipes();
      if (!exited_ && waitpid(pid_, &status_, WNOHANG) == pid_) {
        exited_ = true;
        // Descendants may still hold the pipe: give them a moment, then stop.
        killpg(pid_, SIGKILL);
      }
      if (exited_ && pipe_open_) drain_events();
      if (!exited_) check_limits();
    }
    close(events_[0]);
  }

  // Ends the trial: the logs' last bytes, the group and what left it, the
  // journal published, and the result's fields read from the exit status.
  void finish() {
    drain_logs();
    close_logs();
    killpg(pid_, SIGKILL);       // nothing of the trial outlives it
    kill_token_holders(token_);  // nor what left its group
    end_adopted_children(pid_, children_before_);  // nor what also left its environment
    g_current_group = 0;
    result_.stderr_tail = read_tail(err_log_, 4096);
    publish_files();
    // The stop handler TERMs the group itself, so the worker may be gone
    // before watch() saw the request: a trial that ran into a stop request
    // is interrupted either way.
    if (g_stop_signal != 0) result_.interrupted = true;
    result_.seconds = since(start_);
    result_.torn_tail = decoder_.pending();
    if (result_.journal_cut_bytes > 0) {
      result_.bad_lines.push_back("events.jsonl: the stream's last " + std::to_string(result_.journal_cut_bytes) +
                                  " bytes were read but not journaled (a trial's journal keeps at most " +
                                  std::to_string(kMaxJournalBytes) + " bytes)");
    }
    if (WIFEXITED(status_)) result_.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) result_.term_signal = WTERMSIG(status_);
  }

 private:
  // Note [dbh's files in a trial]: the logs and journal into the trial's
  // folder, once nothing of the trial runs.
  void publish_files() {
    std::string replaced;
    std::string error = files_.publish(&result_.displaced_files, &replaced);
    result_.folder_replaced = replaced;
    if (!error.empty() && result_.journal_error.empty()) result_.journal_error = std::move(error);
  }

  void close_logs() {
    for (int& fd : log_pipes_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    result_.stdout_cut_bytes = logs_[0].finish();
    result_.stderr_cut_bytes = logs_[1].finish();
  }

  void on_decoded(proto::Event&& e) {
    try {
      if (spec_.on_event) spec_.on_event(e);
    } catch (const std::exception& x) {  // a listener's failure drops its event, as a bad line would
      if (result_.bad_lines.size() < proto::kMaxBadLines) result_.bad_lines.push_back(truncate_utf8(x.what(), 2000));
    }
  }

  // Bytes of the event pipe: journaled (at most kMaxJournalBytes; the first
  // failed write ends the journal, as a failed stream stays failed), then
  // decoded into events.
  void handle_bytes(const char* data, size_t n) {
    if (result_.journal_error.empty() && (result_.journal_cut_bytes > 0 || journaled_ + n > kMaxJournalBytes)) {
      result_.journal_cut_bytes += static_cast<int64_t>(n);
    } else if (result_.journal_error.empty()) {
      journaled_ += n;
      if (const int err = write_all(journal_, data, n); err != 0) {
        result_.journal_error = (dir_ / "events.jsonl").string() + ": expected a writable file, got a write error (" +
                                std::strerror(err) + ")";
      }
    }
    decoder_.feed(std::string_view(data, n), [this](proto::Event&& e) { on_decoded(std::move(e)); },
                  result_.bad_lines);
    last_event_ = Clock::now();
  }

  // One read of a log pipe that poll found ready: into its log; its end (or
  // an error) closes it.
  void read_log(int which) {
    const ssize_t got = read(log_pipes_[which], buf_, sizeof buf_);
    if (got > 0) {
      logs_[which].write(buf_, static_cast<size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(log_pipes_[which]);
      log_pipes_[which] = -1;
    }
  }

  void poll_pipes() {
    pollfd p[3] = {{pipe_open_ ? events_[0] : -1, POLLIN, 0}, {log_pipes_[0], POLLIN, 0}, {log_pipes_[1], POLLIN, 0}};
    if (poll(p, 3, 100) <= 0) return;
    if (pipe_open_ && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t got = read(events_[0], buf_, sizeof buf_);
      if (got > 0) {
        handle_bytes(buf_, static_cast<size_t>(got));
      } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        pipe_open_ = false;
      }
    }
    for (int which = 0; which < 2; ++which) {
      if (log_pipes_[which] >= 0 && (p[1 + which].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_log(which);
    }
  }

  // After the worker exited: what the event pipe holds, without waiting for
  // stray writers and for at most kDrainSeconds (a descendant that left the
  // group and keeps writing never holds the trial past its end).
  void drain_events() {
    const auto drain_start = Clock::now();
    while (since(drain_start) < kDrainSeconds) {
      pollfd d{events_[0], POLLIN, 0};
      if (poll(&d, 1, 50) <= 0) break;
      const ssize_t got = read(events_[0], buf_, sizeof buf_);
      if (got <= 0) break;
      handle_bytes(buf_, static_cast<size_t>(got));
    }
    pipe_open_ = false;
  }

  // The stop request, the deadline and the silence limit: each ends the
  // group (TERM, then KILL after the grace period); a hung or late worker's
  // stacks are taken first.
  void check_limits() {
    if (g_stop_signal != 0) {
      result_.interrupted = true;
      kill_group();
    } else if (since(start_) > spec_.deadline_s || since(last_event_) > spec_.silence_s) {
      (since(start_) > spec_.deadline_s ? result_.timed_out : result_.hung) = true;
      if (spec_.stacks_timeout_s > 0) {
        try {
          const int stacks = files_.create("stacks.txt");
          result_.stacks_tool = internal::capture_stacks(pid_, stacks, spec_.stacks_timeout_s);
          if (!result_.stacks_tool.empty()) result_.stacks = read_tail(stacks, 256 * 1024);
        } catch (const Error&) {  // no room for the stacks: the trial still ends as it should
        }
      }
      kill_group();
    }
  }

  void kill_group() {
    result_.killed_by_supervisor = true;
    killpg(pid_, SIGTERM);
    const auto term_at = Clock::now();
    while (since(term_at) < spec_.grace_s) {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        exited_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    killpg(pid_, SIGKILL);
    if (!exited_) {
      waitpid(pid_, &status_, 0);
      exited_ = true;
    }
  }

  // What the logs' pipes still hold, for at most kDrainSeconds: a
  // descendant that keeps one open never holds the trial past its end.
  void drain_logs() {
    const auto drain_start = Clock::now();
    while ((log_pipes_[0] >= 0 || log_pipes_[1] >= 0) && since(drain_start) < kDrainSeconds) {
      pollfd p[2] = {{log_pipes_[0], POLLIN, 0}, {log_pipes_[1], POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) break;
      for (int which = 0; which < 2; ++which) {
        if (log_pipes_[which] >= 0 && (p[which].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_log(which);
      }
    }
  }

  const TrialSpec& spec_;
  TrialResult& result_;
  const fs::path dir_;
  internal::TrialFiles files_;
  int out_log_ = -1, err_log_ = -1, journal_ = -1;  // owned by files_
  int events_[2] = {-1, -1}, out_pipe_[2] = {-1, -1}, err_pipe_[2] = {-1, -1};
  int log_pipes_[2] = {-1, -1};
  BoundedLog logs_[2] = {BoundedLog(-1, "stdout"), BoundedLog(-1, "stderr")};
  proto::StreamDecoder decoder_{"events.jsonl"};
  pid_t pid_ = 0;
  int status_ = 0;
  bool exited_ = false;
  bool pipe_open_ = true;
  size_t journaled_ = 0;
  std::string token_;
  std::vector<pid_t> children_before_;  // this process's children before the worker started
  Clock::time_point start_, last_event_;
  char buf_[65536];
};

}  // namespace

TrialResult run_trial(const TrialSpec& spec) {
  TrialResult result;
  Supervision trial(spec, result);
  if (!trial.open_files() || !trial.open_pipes() || !trial.spawn()) return result;
  trial.watch();
  trial.finish();
  return result;
}

}  // namespace dbh::harness::supervisor
