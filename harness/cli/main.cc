// The dbh command line.

#include <cmath>
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"
#include "harness/proto/worker_link.h"
#include "model/data/image_decode.h"
#include "harness/worker/host_allocator.h"
#include "harness/version.h"

// What a command says when this machine's memory ran out before it finished.
constexpr const char* kOutOfMemory =
    "ran out of memory: the input is too large for this machine (a smaller --size, --batch-size or fewer "
    "images fit); nothing was kept";

namespace {

namespace fs = std::filesystem;
namespace h = dbh::harness;
namespace cli = dbh::harness::cli;

// The commands, in the order `dbh --help` lists them.
constexpr cli::Command (*kCommands[])(CLI::App&) = {
    cli::add_env,     cli::add_train, cli::add_eval,  cli::add_data,     cli::add_run,  cli::add_repeat,
    cli::add_bisect,  cli::add_diagnose, cli::add_qualify, cli::add_suite, cli::add_merge, cli::add_scenario,
    cli::add_tune,    cli::add_list,  cli::add_worker, cli::add_node_probe, cli::add_tune_worker,
};

// Note [Writable before work]: a place dbh will write (an output folder, a
// cache, a JUnit or JSON file, saved weights) is checked before any work:
// the nearest folder of it that exists must be one dbh may write into (not
// a read-only file system, not another user's). A run that trains for an
// hour and then cannot write its JUnit file has wasted the hour.
void check_writable(const std::string& command, const std::string& flag, const std::string& path, bool folder) {
  // What is wrong with the path's shape (a file where a folder is
  // expected, a FIFO, a folder in place of a file) each command says in
  // its own words; this checks only that dbh may write there.
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  fs::path at = folder && fs::is_directory(fs::status(p, ec)) ? p : p.parent_path();
  while (!at.empty() && !fs::exists(fs::symlink_status(at, ec)) && at != at.parent_path()) at = at.parent_path();
  if (!fs::is_directory(fs::status(at, ec))) return;
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw h::UsageError("dbh " + command + ": " + flag + " " + path + ": expected a place dbh may write, but " +
                        at.string() + " is not writable (" + std::strerror(err) + "); nothing was run");
  }
}

// "data check", not "check": the words the user typed after `dbh`.
std::string command_words(const CLI::App* cmd) {
  std::string words = cmd->get_name();
  for (const CLI::App* up = cmd->get_parent(); up != nullptr && up->get_parent() != nullptr; up = up->get_parent()) {
    words = up->get_name() + " " + words;
  }
  return words;
}

// The checks every command's arguments pass before it runs, for `cmd` and
// its subcommands: an empty value is never a path or a number, every word is
// UTF-8, a number is finite, and the places it writes are writable.
void check_arguments(const CLI::App* cmd) {
  const std::string command = command_words(cmd);
  static const std::vector<std::string> kPathOptions = {"--out",    "--data",         "--weights",
                                                        "--resume", "--junit",        "--save-weights",
                                                        "--base",   "--json",         "--cache"};
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->count() == 0 || opt->get_type_size() == 0) continue;
    // Every word dbh echoes into JSON, JUnit and pages must have a
    // faithful spelling there: a path or value that is not UTF-8 is
    // refused up front, never an internal error after the work.
    // (The words of the command `scenario from-command` converts are its
    // own to judge: it names the key, or quotes the word as $'…'.)
    const bool converted_words = cmd->get_name() == "from-command" && opt->get_lnames().empty();
    for (const auto& value : opt->results()) {
      if (!converted_words && h::valid_utf8(value) != value) {
        const std::string flag = opt->get_lnames().empty() ? "" : "--" + opt->get_lnames().front() + " ";
        throw h::UsageError("dbh " + command + ": " + flag + h::one_line(h::valid_utf8(value)) +
                            ": expected UTF-8, got bytes that are not (shown as \uFFFD)");
      }
    }
    if (opt->get_lnames().empty()) continue;
    // An empty path (`--out ""`, an unset shell variable) is never a place to
    // read or write: without this check some commands would fall back to
    // their default folder and write where the user did not ask. Any other
    // option too: `--shard "$SHARD"` with SHARD unset would run the whole
    // suite in every job.
    const std::string name = "--" + opt->get_lnames().front();
    const bool path = std::find(kPathOptions.begin(), kPathOptions.end(), name) != kPathOptions.end();
    for (const auto& value : opt->results()) {
      if (value.empty()) {
        throw h::UsageError("dbh " + command + ": " + name + ": expected " + (path ? "a path" : "a value") +
                            ", got \"\"");
      }
      // A number is finite, whatever the option: CLI11 reads "nan" and
      // "inf" as doubles, and a range check passes NaN (every comparison
      // with it is false).
      if (!path) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end != value.c_str() && *end == '\0' && !std::isfinite(v)) {
          throw h::UsageError("dbh " + command + ": " + name + ": expected a finite number, got \"" + value + "\"");
        }
      }
    }
  }
  // The places this command writes, before any work (Note [Writable before work]).
  if (cmd->parsed()) {
    for (const char* flag : {"--out", "--cache", "--junit", "--save-weights", "--json"}) {
      const CLI::Option* opt = cmd->get_option_no_throw(flag);
      if (opt == nullptr || opt->count() == 0 || opt->get_type_size() == 0) continue;
      // from-command's --out is the scenario file it writes.
      const bool folder =
          (std::string(flag) == "--out" && cmd->get_name() != "from-command") || std::string(flag) == "--cache";
      for (const auto& value : opt->results()) check_writable(command, flag, value, folder);
    }
  }
  for (const CLI::App* sub : cmd->get_subcommands()) check_arguments(sub);
}

// The exit status and message of what escaped a command (called inside a
// catch block): bad input is 2, an interruption its signal's status, a bug
// in dbh 3.
int exit_status_of_exception() {
  try {
    throw;
  } catch (const h::UsageError& e) {
    // One line: text from the user's files and names never starts a line of
    // its own (a CI runner reads `::command` lines from the output).
    std::cerr << "dbh: " << h::one_line(e.what()) << "\n";
    return 2;
  } catch (const h::supervisor::Interrupted& e) {
    // `train`, `eval` and `data show` stop between steps or images and
    // remove what they wrote (their output folder is claimed, not committed).
    std::cerr << "dbh: " << h::one_line(e.what()) << "; nothing was kept\n";
    return e.exit_code();
  } catch (const fs::filesystem_error& e) {
    // A file-system problem (a loop, a permission, a non-directory, a full
    // disk) is the user's to fix: name the path and the errno.
    std::cerr << "dbh: " << (e.path1().empty() ? std::string() : h::one_line(e.path1().string()) + ": ")
              << "expected a usable path, got an error (" << e.code().message() << ")\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "dbh: " << kOutOfMemory << "\n";
    return 2;
  } catch (const std::exception& e) {
    // Note [Memory exhaustion is never an internal error]: an input too large
    // for this machine (`dbh eval --size 8192`, a data show of a huge image)
    // is the user's to change, as `dbh run` makes it an outcome; it is exit
    // 2 with the knowledge base's class, not exit 3.
    const std::string what = e.what();
    const h::kb::FailureClass* c = nullptr;
    try {
      c = h::kb::KnowledgeBase::shipped().match_message(what);
    } catch (const std::exception&) {
      c = nullptr;  // no knowledge base: the message alone
    }
    if (c != nullptr && h::supervisor::is_memory_exhaustion(c->id)) {
      std::cerr << "dbh: " << kOutOfMemory << " (" << h::truncate_utf8(h::one_line(what), 300) << ")\n";
      return 2;
    }
    std::cerr << "dbh: internal error: " << h::one_line(what) << "\n";
    return h::kInternalErrorExit;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A worker dies with its supervisor: armed before anything else runs.
  if (argc > 1 && (std::string(argv[1]) == "__worker" || std::string(argv[1]) == "__tune")) {
    h::proto::die_with_supervisor();
  }
  // OpenCV's own pixel limit, for the formats whose headers dbh does not read
  // itself (model::kMaxImagePixels); read once, at the first decode.
  ::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(dbh::model::kMaxImagePixels).c_str(), /*overwrite=*/0);
  CLI::App app{
      "dbh: reproduce, inject and bisect failures in DBNet training.\n"
      "Exit codes: 0 expectations met, 1 not met, 2 usage/config/input error, "
      "3 internal error, 4 not run here (a device this machine lacks)."};
  app.name("dbh");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dbh ") + h::kVersion + " (" + h::kGitRevision + ")");
  std::vector<cli::Command> commands;
  for (const auto add : kCommands) commands.push_back(add(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    check_arguments(&app);
    // Note [Keeping freed host memory]: every command that allocates tensors
    // (a worker, train, eval, data show) steps with the caching allocator.
    h::worker::install_host_allocator();
    for (const cli::Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (...) {
    return exit_status_of_exception();
  }
  return 2;
}
