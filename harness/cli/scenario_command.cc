#include "harness/common/home.h"
#include "harness/cli/scenario_command.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/report/report.h"
#include "harness/supervisor/machine.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/config_file.h"
#include "harness/scenario/from_command.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kWhere = "scenario from-command";

// Removes a file or folder this command created, unless released.
class Cleanup {
 public:
  explicit Cleanup(fs::path path) : path_(std::move(path)) {}
  ~Cleanup() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size()) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

// The command line: one argument is the whole line ("-" reads it from stdin);
// several are its words, already split by the caller's shell.
std::string command_text(const std::vector<std::string>& args) {
  if (args.size() == 1 && args.front() == "-") {
    std::string text;
    char buf[65536];
    for (;;) {
      std::cin.read(buf, sizeof buf);
      text.append(buf, static_cast<size_t>(std::cin.gcount()));
      if (text.size() > (1u << 20)) {
        throw UsageError(std::string(kWhere) + ": expected a command of at most 1 MiB on standard input, got more");
      }
      if (!std::cin) break;
    }
    return text;
  }
  if (args.size() == 1) return args.front();
  std::string text;
  // Re-split by split_shell_words, which reads POSIX quotes (not `$'…'`).
  for (const auto& a : args)
    text += (text.empty() ? "" : " ") + shell_quote_posix(a);
  return text;
}

// Loads the generated text from `file` as `dbh run` would; a scenario that
// does not load is bad input, named as `shown`.
void check_loads(const fs::path& file, const std::string& shown) {
  try {
    (void)scenario::load_scenario(file.string(), {}, worker::input_checks());
  } catch (const ScenarioError& e) {
    throw UsageError(std::string(kWhere) + ": expected a scenario dbh loads, got one that does not: " +
                     replace_all(e.what(), file.string(), shown));
  }
}

// Note [dbh's keys in your configuration]: the command's composed
// configuration and its parser's options, as its `hello` reports them in
// describe mode, run as written (dbh passes it nothing), and the keys of the
// config files its words name (Note [A copy of your config file]), into
// `fo`; said on stderr when there is nothing to map into.
void read_user_config(const scenario::ConvertedCommand& c, scenario::FromCommandOptions& fo) {
  const std::vector<std::string>& command = c.worker_command;
  for (size_t i = scenario::first_argument(command); i < command.size(); ++i) {
    if (!scenario::config_file_name(command[i])) continue;
    const fs::path file = fs::path(command[i]).is_absolute() ? fs::path(command[i]) : fs::path(fo.cwd) / command[i];
    if (auto entries = scenario::read_config_file(file.string())) fo.config_files.emplace_back(i, std::move(*entries));
  }
  scenario::Scenario probe;
  probe.worker.command = command;
  probe.worker.cwd = fo.cwd;
  for (const auto& [name, value] : c.worker_env) probe.worker.env[name] = value;
  for (const auto& key : scenario::worker_passed_keys()) probe.worker.keys[key] = "";
  for (const auto& key : scenario::mappable_keys()) probe.worker.keys[key] = "";
  probe.data.source = scenario::DataSource::kReal;
  probe.hardware.device = "cpu";
  const std::string then = "dbh passes its keys under the Lightning/Hydra alias names (worker.keys in the scenario "
                           "maps them to yours)";
  try {
    supervisor::WorkerDescription d = supervisor::describe_worker(probe);
    fo.parser_options = std::move(d.options);
    if (!d.config.empty() || !fo.parser_options.empty() || !fo.config_files.empty()) {
      fo.user_config = std::move(d.config);
      return;
    }
    std::cerr << kWhere << ": note: your command's `hello` carries no `config`, so " << then
              << "; give the adapter your composed configuration (dbh_adapter.connect(config=cfg), or "
                 "DbhCallback(config=cfg)) for dbh to find its keys in it\n";
  } catch (const UsageError& e) {
    std::cerr << kWhere << ": note: could not read your command's configuration (" << one_line(e.what()) << "), so "
              << then << "\n";
    if (!fo.config_files.empty()) fo.user_config = std::vector<scenario::ConfigEntry>{};
  }
}

// --base: the scenario the new one includes, named relative to --out (on
// stdout, where the text has no place yet, absolute). Never --out itself,
// nor a file --base includes: replaced, the new scenario would include
// itself, and neither it nor --base would load again.
void set_base(const ScenarioFromCommandOptions& o, const fs::path& out, scenario::FromCommandOptions& fo) {
  check_input_file(o.base, "a scenario file", kWhere, "--base");
  const fs::path base = fs::absolute(o.base).lexically_normal();
  std::error_code ec;
  if (!out.empty() && fs::equivalent(base, out, ec)) {
    // With --force the base would be replaced by a scenario that includes
    // itself: the user's scenario is lost.
    throw UsageError(std::string(kWhere) + " --out: expected a file other than --base, got the --base file (" +
                     o.out + ")");
  }
  // Nor a file --base includes: replaced, the new scenario would include
  // itself, and neither it nor --base would load again.
  if (!out.empty()) {
    std::vector<std::string> included;
    try {
      included = scenario::scenario_files(o.base);
    } catch (const ScenarioError& e) {
      throw UsageError(std::string(kWhere) + " --base: expected a scenario dbh loads, got one that does not: " +
                       e.what());
    }
    for (const auto& f : included) {
      if (fs::equivalent(f, out, ec)) {
        throw UsageError(std::string(kWhere) + " --out: expected a file --base does not include, got " + o.out +
                         ", which it includes (replaced, it would include itself)");
      }
    }
  }
  // Relative to the file that names it (docs/scenarios.md); on stdout the
  // text has no place yet, so the path is absolute.
  const fs::path rel = out.empty() ? fs::path() : base.lexically_relative(out.parent_path());
  fo.include = rel.empty() ? base.string() : rel.string();
}

// After --out is written: what running it here does, and the command that
// does it, runnable here as pasted.
void print_next_steps(const ScenarioFromCommandOptions& o, const fs::path& out, bool has_gpu) {
  // What running it here does, and the command that does it.
  const scenario::Scenario written = scenario::load_scenario(out.string(), {}, worker::input_checks());
  // The device and the dataset may come from the worker's configuration:
  // one line each on the terminal (Note [Escaped at output only]).
  std::cout << (written.worker.external() ? "runs your command under dbh" : "trains dbh's DBNet") << " on "
            << one_line(written.hardware.device)
            << (written.data.source == scenario::DataSource::kReal
                    ? (written.data.path.empty() ? std::string(" with the dataset your configuration names")
                                                 : " with " + one_line(written.data.path))
                    : " on " + to_string(written.data.source) + " (pass --data DIR for your dataset)")
            << "\n";
  // The next command runs here as pasted: a GPU scenario on a machine
  // without one gets the overrides that run it on the CPU (and says so).
  const std::string written_at = fs::absolute(o.out).lexically_normal().string();
  std::vector<std::string> next = {self_command(), "run", written_at};
  const bool gpu_elsewhere = written.hardware.device.rfind("cuda", 0) == 0 && !has_gpu;
  if (gpu_elsewhere) {
    next.push_back(scenario::override_text(DBH_SCENARIO_KEY(hardware.device), "cpu"));
    if (written.train.precision != model::Precision::kFp32)
      next.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.precision), "fp32"));
  }
  std::cout << "next:   " << shell_command(next) << "\n";
  if (gpu_elsewhere) {
    std::cout << "        (this machine has no NVIDIA GPU: that runs it on the CPU; "
              << shell_command({self_command(), "run", written_at}) << " runs it as written, on a GPU machine)\n";
  }
}

}  // namespace

int scenario_from_command_command(const ScenarioFromCommandOptions& o) {
  const std::string command = command_text(o.command);
  scenario::FromCommandOptions fo;
  fo.name = o.name;
  fo.external = o.external;
  fo.cwd = fs::current_path().string();
  fo.data_key = o.data_key;
  if (!o.data.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.data, ec)) {
      throw UsageError(std::string(kWhere) + " --data: expected a dataset folder, got \"" + o.data + "\"");
    }
    fo.data = fs::absolute(o.data).lexically_normal().string();
  }
  if (!o.data_key.empty() && !o.external) {
    throw UsageError(std::string(kWhere) + " --data-key: expected --external (only your own command reads your keys)");
  }
  // Lightning's auto device on this machine: an NVIDIA GPU.
  fo.has_gpu = supervisor::nvidia_gpu_present();
  fs::path out;
  if (!o.out.empty()) {
    out = fs::absolute(o.out).lexically_normal();
    // With --force any regular file may be replaced; never a link, a folder,
    // a FIFO or a device.
    OutputFileRule rule{kWhere, "--out", nullptr, "", "(or --force to replace it)"};
    if (o.force) rule.may_replace = [](const std::string&) { return true; };
    check_output_file(o.out, rule);
    if (!fo.data.empty() && (path_within(out.string(), fo.data) || within_by_identity(out.parent_path().string(), fo.data))) {
      throw UsageError(std::string(kWhere) + " --out " + one_line(o.out) + ": expected a file outside the dataset " +
                       one_line(fo.data) + ", got one inside it (dbh never writes into your data)");
    }
  }
  if (!o.base.empty()) set_base(o, out, fo);
  if (o.external) {
    // The describe run is a trial: Ctrl-C or TERM ends it and this command
    // with 128 + signal, the worker's process group with it.
    supervisor::install_stop_handlers();
    // Note [dbh's keys in your configuration]: the command's own keys, read
    // from the configuration it composes, run as written (its words alone:
    // where --data goes is what the configuration tells).
    scenario::FromCommandOptions as_written = fo;
    as_written.data.clear();
    as_written.data_key.clear();
    read_user_config(scenario::scenario_from_command(command, as_written), fo);
  }
  const scenario::ConvertedCommand c = scenario::scenario_from_command(command, fo);

  if (out.empty()) {
    std::string templ = (fs::temp_directory_path() / "dbh-from-command-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      throw UsageError(std::string(kWhere) + ": expected a temporary folder to check the scenario in, got an error (" +
                       std::strerror(errno) + ")");
    }
    Cleanup cleanup{fs::path(templ)};
    const fs::path file = fs::path(templ) / "scenario.yaml";
    write_file_atomically(file.string(), c.yaml);
    check_loads(file, "<generated>");
    std::cout << c.yaml << std::flush;
  } else {
    // Written under a temporary name beside --out, checked, then put in
    // place: linked (fails if a file appeared meanwhile) or, with --force,
    // renamed over the old one.
    const fs::path tmp = out.string() + ".new." + std::to_string(::getpid());
    Cleanup cleanup{tmp};
    write_file_atomically(tmp.string(), c.yaml);
    check_loads(tmp, out.string());
    if (o.force) {
      replace_file_atomically(tmp.string(), out.string());
      cleanup.release();
    } else if (::link(tmp.c_str(), out.c_str()) != 0) {
      const int err = errno;
      throw UsageError(
          std::string(kWhere) + " --out: expected a new file" + (err == EEXIST ? " (or --force to replace it)" : "") +
          ", got " +
          (err == EEXIST ? "one that appeared meanwhile" : std::string("an error (") + std::strerror(err) + ")") +
          " (" + o.out + ")");
    }
    std::cout << "wrote " << o.out << "\n";
    print_next_steps(o, out, fo.has_gpu);
  }
  for (const auto& m : c.mapped) std::cerr << "your key: " << one_line(m) << "\n";
  for (const auto& u : c.unmapped)
    std::cerr << "unmapped: " << one_line(u) << "\n";
  return 0;
}

int scenario_keys_command() {
  std::cout << scenario::scenario_keys_markdown() << std::flush;
  return 0;
}

}  // namespace dbh::harness::cli
