#include "harness/cli/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/common/out_file.h"
#include "harness/cli/env_command.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/report/report.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/common/value.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"
#include "harness/worker/training.h"
#include "harness/env/environment.h"
#include "model/data/batch.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/eval/infer.h"
#include "model/train/trainer.h"

namespace dbh::harness {
namespace fs = std::filesystem;

int run_env_command(bool json) {
  const auto env = collect_environment();
  std::cout << (json ? environment_json(env) + "\n" : format_environment(env));
  return 0;
}

const std::vector<TrainFlag>& train_flags() {
  static const std::vector<TrainFlag> flags = {
      {"--data", DBH_SCENARIO_KEY(data.path),
       "Dataset directory (images + annotations.json); synthetic data when omitted"},
      {"--source", DBH_SCENARIO_KEY(data.source),
       "Data source: synthetic_boxes, synthetic_random, synthetic_render (real with --data)"},
      {"--on-invalid", DBH_SCENARIO_KEY(data.on_invalid), "What to do with invalid annotations: error, skip or clip"},
      {"--num-workers", DBH_SCENARIO_KEY(data.num_workers), "Loader threads; 0 loads inline"},
      {"--encoder", DBH_SCENARIO_KEY(model.encoder), "ResNet depth: 18, 34 or 50"},
      {"--decoder", DBH_SCENARIO_KEY(model.decoder), "Neck: fpn or pan"},
      {"--weights", DBH_SCENARIO_KEY(model.weights), "Initial weights (a weights file or a dbh checkpoint)"},
      {"--batch-size", DBH_SCENARIO_KEY(data.batch_size), "Samples per micro-batch"},
      {"--size", DBH_SCENARIO_KEY(data.size), "Square training size in pixels (multiple of 32)"},
      {"--steps", DBH_SCENARIO_KEY(train.max_steps), "Optimizer steps"},
      {"--accumulation", DBH_SCENARIO_KEY(train.accumulation), "Micro-batches per optimizer step"},
      {"--optimizer", DBH_SCENARIO_KEY(train.optimizer), "sgd or adam"},
      {"--lr", DBH_SCENARIO_KEY(train.lr), "Base learning rate (poly schedule)"},
      {"--momentum", DBH_SCENARIO_KEY(train.momentum), "SGD momentum"},
      {"--weight-decay", DBH_SCENARIO_KEY(train.weight_decay), "Weight decay"},
      {"--grad-clip", DBH_SCENARIO_KEY(train.grad_clip), "Max gradient norm; 0 = off"},
      {"--precision", DBH_SCENARIO_KEY(train.precision), "fp32, fp16 or bf16 (AMP on CUDA)"},
      {"--channels-last", DBH_SCENARIO_KEY(train.channels_last),
       "auto (measured once per machine and setup), true or false"},
      {"--threads", DBH_SCENARIO_KEY(train.threads), "Intra-op threads: auto (measured), 0 = all cores, or N"},
      {"--seed", DBH_SCENARIO_KEY(train.seed), "Seed of weights, data and augmentation"},
      {"--checkpoint-every", DBH_SCENARIO_KEY(train.checkpoint_every), "Checkpoint every K steps; 0 = final only"},
      {"--resume", DBH_SCENARIO_KEY(train.resume_from), "Resume from a checkpoint"},
      {"--device", DBH_SCENARIO_KEY(hardware.device), "cpu, cuda or cuda:N"},
  };
  return flags;
}

namespace {

const TrainFlag& flag_named(const std::string& flag) {
  for (const auto& f : train_flags()) {
    if (f.flag == flag) return f;
  }
  throw std::logic_error("dbh train: no flag " + flag);
}

// A scenario error about one flag's override, said in the flag's terms:
// "<override> train.max_steps=0: train.max_steps: expected …" becomes
// "dbh train: --steps: expected …".
std::string in_flag_terms(const std::string& message, const std::vector<std::pair<std::string, std::string>>& given) {
  for (const auto& [flag, value] : given) {
    const std::string& key = flag_named(flag).key;
    const std::string prefix = "<override> " + override_text(key, value);
    if (message.rfind(prefix, 0) != 0) continue;
    std::string rest = message.substr(prefix.size());
    if (rest.rfind(":0:0", 0) == 0) rest = rest.substr(4);
    if (rest.rfind(": ", 0) == 0) rest = rest.substr(2);
    if (rest.rfind(key + ": ", 0) == 0) rest = rest.substr(key.size() + 2);
    return "dbh train: " + flag + ": " + rest;
  }
  return "dbh train: " + message;
}

}  // namespace

std::vector<std::string> train_overrides(const TrainCommandOptions& o) {
  std::vector<std::string> out = {
      override_text(DBH_SCENARIO_KEY(data.augment), o.augment ? "true" : "false"),
      override_text(DBH_SCENARIO_KEY(data.validate), o.validate_batches ? "true" : "false")};
  bool data = false;
  std::string source;
  for (const auto& [flag, value] : o.given) {
    if (flag == "--data") data = true;
    if (flag == "--source") source = value;
  }
  bool weights = false, resume = false;
  for (const auto& [flag, value] : o.given) {
    weights = weights || flag == "--weights";
    resume = resume || flag == "--resume";
  }
  if (weights && resume) {
    // A resumed run takes its model from the checkpoint: the weights would be
    // silently ignored, and the summary would name both.
    throw UsageError("dbh train: --weights: expected either --weights (initial weights) or --resume (a checkpoint "
                     "to continue), got both");
  }
  if (data && !source.empty() && source != "real") {
    throw UsageError("dbh train: --source " + source + ": expected no --source with --data (a dataset is real data), got both");
  }
  if (data && source.empty()) out.push_back(override_text(DBH_SCENARIO_KEY(data.source), "real"));
  for (const auto& [flag, value] : o.given) out.push_back(override_text(flag_named(flag).key, value));
  return out;
}

int run_train_command(const TrainCommandOptions& o) {
  // Input checks first: bad input leaves nothing behind. The flags are
  // scenario overrides (Note [One training builder]): one set of bounds and
  // defaults for `dbh train` and `dbh run`.
  Scenario s;
  try {
    // dbh's own keys: no file, no includes, no aliases to translate.
    Value tree;
    for (const auto& kv : train_overrides(o)) apply_override(tree, kv);
    s = scenario_from_tree(tree, "");
  } catch (const ScenarioError& e) {
    throw UsageError(in_flag_terms(e.what(), o.given));
  }
  s.name = "train";
  auto usage = [](const std::string& key, const std::string& expected, const std::string& got) {
    throw UsageError("dbh train: " + key + ": expected " + expected + ", got " + got);
  };
  const fs::path out = o.out.empty() ? fs::path(default_output_folder("train")) : fs::path(o.out);
  // The output folder is claimed as every command's is: a user's folder (a
  // dataset, another command's results) is refused, a second dbh on it is
  // locked out, and on any error or interruption (SIGINT, SIGTERM: checked
  // between steps) what this command wrote is removed.
  install_stop_handlers();
  // The training dataset when it is read (not for synthetic data), the validation one always.
  check_outside_datasets("dbh train", "--out", out.string(),
                         uses_dataset(s) ? dataset_folders(s) : std::vector<std::string>{s.data.val.path});
  // Weights or a checkpoint read from this folder stay where they are.
  OutputDir claim(out, "train", OutputDir::Reuse::kReplace, {s.model.weights, s.train.resume_from});
  auto stop_check = [] {
    if (const int signal_number = stop_requested()) throw Interrupted(signal_number);
  };
  // `auto` layout and threads: measured once per machine and setup, as for
  // `dbh run` (Note [Measured choices]).
  const nlohmann::json choices = resolve_measured_choices(s, (out / "tuning").string());
  stop_check();
  if (!o.quiet && !choices.is_null()) {
    std::cout << terminal_text(measured_choices_line(choices)) << "\n";
  }

  model::DbNet dbnet = make_net(s);
  const std::string arch = "resnet" + std::to_string(s.model.encoder) + " + " + s.model.decoder;
  // A file of another architecture (or not of dbh) is the user's to fix.
  auto load_error = [&](const std::string& key, const std::string& path, const std::exception& e) {
    std::string what = e.what();
    if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) what = c10->what_without_backtrace();
    what = one_line(what.substr(0, what.find('\n')));
    usage(key + " " + path, "a file of " + arch + " (--encoder, --decoder)", "one that does not load: " + what);
  };
  if (!s.model.weights.empty()) {
    // A weights file or a dbh checkpoint (its model part), as `dbh eval`
    // reads them: DbNet::load_weights finds nothing in a checkpoint.
    model::ModelStateReport state;
    try {
      state = model::load_model_state(dbnet, s.model.weights);
    } catch (const std::exception& e) {
      load_error("--weights", s.model.weights, e);
    }
    const int64_t n = state.loaded;
    const size_t total = dbnet->named_parameters().size() + dbnet->named_buffers().size();
    // As PyTorch's load_state_dict: a tensor of another shape is never
    // loaded (ModelStateReport::fits_as_initial_weights), and a file that
    // holds only part of the model (how a backbone is initialised: a
    // pretrained encoder, another decoder) is refused unless --allow-partial
    // (strict=False), as `dbh eval` does; what keeps its initial values is
    // then said.
    if (!state.fits_as_initial_weights()) {
      usage("--weights " + s.model.weights, "a file holding tensors of " + arch + " (--encoder, --decoder)",
            n == 0 ? "one none of whose entries has a name and shape of that model"
                   : "a file of another model (" + state.summary() + ")");
    }
    if (static_cast<size_t>(n) < total) {
      if (!o.allow_partial) {
        usage("--weights " + s.model.weights,
              "a file holding every tensor of " + arch + " (--encoder, --decoder; --allow-partial to train from part)",
              "a part of it (" + state.summary() + ")");
      }
      std::cerr << "warning: --weights " << s.model.weights << ": loaded " << n << " of " << total << " tensors of "
                << arch << "; the others keep their initial values (" << state.summary() << ")\n";
    }
    if (!o.quiet) std::cout << "loaded " << n << " tensors from " << s.model.weights << "\n";
  }
  model::Trainer trainer(dbnet, train_options(s));
  if (!s.train.resume_from.empty()) {
    try {
      trainer.load_checkpoint(s.train.resume_from);
    } catch (const std::exception& e) {
      load_error("--resume", s.train.resume_from, e);
    }
    // Nothing left to train: "0 steps, loss 0 -> 0" would be a result nobody
    // measured.
    if (trainer.next_step() >= s.train.max_steps) {
      usage("--steps", "more than the " + std::to_string(trainer.next_step()) + " steps --resume " +
                           s.train.resume_from + " has already trained",
            std::to_string(s.train.max_steps));
    }
  }

  std::string data_desc = s.data.source;
  std::shared_ptr<model::Loader> loader;
  if (uses_dataset(s)) {
    std::shared_ptr<model::Dataset> dataset;
    try {
      dataset = std::make_shared<model::Dataset>(dataset_options(s, s.data.path));
    } catch (const model::DataError& e) {
      for (const auto& d : e.defects()) std::cerr << "  " << one_line(d.message) << "\n";
      // A policy only helps with defects of single words or images: not an
      // unreadable file, a duplicate or a name leaving the dataset.
      const bool policy_helps = std::none_of(e.defects().begin(), e.defects().end(), [](const model::Defect& d) {
        return model::refuses_dataset(d.kind) || d.kind == model::DefectKind::kUnreadableFile;
      });
      usage("--data " + s.data.path,
            std::string("a dataset without defects") + (policy_helps ? " (or --on-invalid skip|clip)" : ""),
            std::to_string(e.defects().size()) + " defect(s), listed above");
    }
    for (const auto& d : dataset->defects()) std::cerr << "warning: " << one_line(d.message) << "\n";
    loader = std::make_shared<model::Loader>(dataset, loader_options(s));
    data_desc = s.data.source == "synthetic_render"
                    ? "synthetic_render (" + std::to_string(dataset->size()) + " rendered images)"
                    : "real (" + s.data.path + ", " + std::to_string(dataset->size()) + " images, " +
                          dataset->format() + ")";
  }
  const model::BatchSource source = make_batch_source(s, loader);
  loader.reset();  // the source owns it

  const int64_t steps = s.train.max_steps;
  if (!o.quiet) {
    std::cout << "dbh train: " << arch << ", data " << data_desc << ", batch " << s.data.batch_size << "x"
              << s.train.accumulation << ", " << s.data.size << "x" << s.data.size << ", " << steps << " steps, "
              << s.train.optimizer << " lr " << s.train.lr << ", " << s.train.precision << " on "
              << s.hardware.device << ", seed " << s.train.seed << "\n";
  }
  const fs::path csv_path = out / "metrics.csv";
  // Created anew, never written through a link left in the folder (files.h,
  // Note [Never through a link]); written a row at a time, so it can be
  // followed while training runs.
  struct Csv {
    int fd = -1;
    int error = 0;
    ~Csv() {
      if (fd >= 0) ::close(fd);
    }
    void write(const std::string& text) {
      if (error == 0) error = write_all(fd, text.data(), text.size());
    }
  } csv;
  csv.fd = create_file_no_follow(csv_path.string());
  if (csv.fd < 0) {
    throw ReportError(csv_path.string() + ": expected a file dbh can create, got an error (" + std::strerror(errno) +
                      ")");
  }
  csv.write("step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,loss_bits\n");
  auto save = [&](const fs::path& path) {
    // Through a temporary name: a checkpoint is complete or absent.
    const fs::path tmp = path.string() + ".tmp";
    try {
      trainer.save_checkpoint(tmp.string());
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove(tmp, ec);
      const std::string what = e.what();
      throw ReportError(path.string() + ": expected a writable file, got an error (" +
                        one_line(what.substr(0, what.find('\n'))) + ")");
    }
    replace_file_atomically(tmp.string(), path.string());
  };
  std::vector<model::StepResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  while (trainer.next_step() < steps) {
    stop_check();
    model::StepResult r;
    try {
      r = trainer.step(source);
    } catch (const model::DataError& e) {
      throw UsageError("dbh train: step " + std::to_string(trainer.next_step()) + ": " + e.what());
    }
    results.push_back(r);
    std::ostringstream row;
    row << r.step << "," << std::setprecision(9) << r.loss << "," << r.bce << "," << r.l1 << ","
        << r.dice << "," << r.lr << "," << r.grad_norm << "," << (r.skipped ? 1 : 0) << ","
        << r.loss_scale << "," << r.seconds << "," << r.loss_bits << "\n";
    csv.write(row.str());
    if (!o.quiet) {
      std::cout << "step " << std::setw(4) << r.step + 1 << "/" << steps << "  loss "
                << std::fixed << std::setprecision(4) << r.loss << " (bce " << r.bce << ", l1 "
                << r.l1 << ", dice " << r.dice << ")  lr " << std::setprecision(5) << r.lr
                << "  |g| " << std::setprecision(3) << r.grad_norm << "  " << std::setprecision(2)
                << r.seconds << " s" << std::defaultfloat << std::endl;  // flushed: logs show progress
    }
    if (s.train.checkpoint_every > 0 && trainer.next_step() % s.train.checkpoint_every == 0) {
      save(out / ("checkpoint-" + std::to_string(trainer.next_step()) + ".pt"));
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop_check();
  save(out / "checkpoint-final.pt");
  if (csv.error == 0 && ::close(csv.fd) != 0) csv.error = errno;
  csv.fd = -1;
  if (csv.error != 0) {
    throw ReportError(csv_path.string() + ": expected a writable file, got a write error (" +
                      std::strerror(csv.error) + ")");
  }

  bool finite = true;
  for (const auto& r : results) finite = finite && std::isfinite(r.loss);
  nlohmann::ordered_json summary;
  summary["schema_version"] = 1;
  summary["command"] = "train";
  summary["data"] = data_desc;
  summary["steps_completed"] = results.size();
  summary["first_loss"] = results.empty() ? 0.0 : results.front().loss;
  summary["last_loss"] = results.empty() ? 0.0 : results.back().loss;
  summary["all_losses_finite"] = finite;
  summary["wall_seconds"] = wall;
  // What trained, as a scenario: `dbh run` with these keys trains the same.
  summary["scenario"] = nlohmann::json::parse(resolved_json(s));
  if (!choices.is_null()) summary["measured_choices"] = choices;
  summary["environment"] = nlohmann::json::parse(environment_json(collect_environment()));
  write_file_atomically((out / "summary.json").string(),
                        summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  stop_check();
  claim.commit();
  std::cout << "dbh train: " << results.size() << " steps in " << std::fixed << std::setprecision(1)
            << wall << " s, loss " << std::setprecision(4)
            << (results.empty() ? 0.0 : results.front().loss) << " -> "
            << (results.empty() ? 0.0 : results.back().loss) << "\n"
            << "output: " << fs::absolute(out).string() << " (metrics.csv, summary.json, checkpoint-final.pt)\n";
  return finite ? 0 : 1;
}

}  // namespace dbh::harness
