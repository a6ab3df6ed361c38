// `dbh data check` and `dbh data show`: their flags (Note [The command table]).

#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/data_command.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;
namespace h = dbh::harness;

Command add_data(CLI::App& app) {
  struct State {
    DataCheckOptions check;
    DataShowOptions show;
  };
  auto s = std::make_shared<State>();
  auto* data = app.add_subcommand("data", "Inspect a dataset the way training reads it");
  data->require_subcommand(1);
  // A dataset folder argument: what is there instead is named ("got a FIFO",
  // "got a symlink loop"), not only that it is no folder.
  const CLI::Validator dataset_folder(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (fs::is_directory(path, ec)) return "";
        return h::one_line(path) + ": expected a dataset folder, got " + h::describe_path(path);
      },
      "DIR");
  auto* check = data->add_subcommand(
      "check", "Load a dataset, print counts and every defect with its location. "
               "Exit 0 clean, 1 defects found, 2 unreadable");
  check->add_option("DIR", s->check.dir, "Dataset folder (images/ + annotations.json or icdar/)")
      ->required()->check(dataset_folder);
  check->add_option("--on-invalid", s->check.on_invalid, "Policy the check applies")
      ->check(CLI::IsMember({"error", "skip", "clip"}))->capture_default_str();
  check->add_option("--json", s->check.json_out, "Write the JSON summary to this file");
  check->add_flag("-q,--quiet", s->check.quiet, "Print the JSON summary instead of text");
  auto* show = data->add_subcommand(
      "show", "Write what the model is trained on for one sample: input, label maps, overlay");
  show->add_option("DIR", s->show.dir, "Dataset folder")->required()->check(dataset_folder);
  show->add_option("--index", s->show.index, "Sample index")->required();
  show->add_flag("--no-augment", s->show.no_augment, "Letterbox only");
  show->add_option("--size", s->show.size, "Square size (multiple of 32)")
      ->check(CLI::Range(int64_t{32}, int64_t{8192}))->capture_default_str();
  show->add_option("--epoch", s->show.epoch, "Epoch of the augmentation draw")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))->capture_default_str();
  // Checked as text: a uint64 option would take "-1" as 2^64 - 1.
  show->add_option("--seed", s->show.seed, "Augmentation seed")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))->capture_default_str();
  show->add_option("--out", s->show.out, "Output folder")->required();
  return {data, [s, check] {
            if (*check) return run_data_check(s->check);
            if (s->show.size % 32 != 0) {
              throw h::UsageError("dbh data show --size: expected a multiple of 32, got " +
                                  std::to_string(s->show.size));
            }
            return run_data_show(s->show);
          }};
}

}  // namespace dbh::harness::cli
