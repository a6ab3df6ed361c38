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
#include <optional>
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
#include "harness/monitors/monitors.h"
#include "harness/proto/event_types.h"
#include "harness/report/metrics_csv.h"
#include "harness/report/report.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/common/value.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"
#include "harness/worker/training.h"
#include "harness/worker/validation.h"
#include "harness/env/environment.h"
#include "model/data/batch.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/eval/infer.h"
#include "model/train/trainer.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

int run_env_command(bool json) {
  const auto env = env::collect_environment();
  std::cout << (json ? env::environment_json(env) + "\n" : env::format_environment(env));
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
      {"--val-data", DBH_SCENARIO_KEY(data.val.path),
       "Validation dataset folder, scored (ICDAR 2015 P/R/H) every --eval-every steps and after the last"},
      {"--eval-every", DBH_SCENARIO_KEY(train.eval_every), "Validate every K steps (with --val-data); 0 = never"},
      {"--val-size", DBH_SCENARIO_KEY(data.val.size),
       "Validation: the size each image's --val-side side is resized to (multiple of 32)"},
      {"--val-side", DBH_SCENARIO_KEY(data.val.side), "Validation: short or long"},
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
    const std::string prefix = "<override> " + scenario::override_text(key, value);
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
      scenario::override_text(DBH_SCENARIO_KEY(data.augment), o.augment ? "true" : "false"),
      scenario::override_text(DBH_SCENARIO_KEY(data.validate), o.validate_batches ? "true" : "false")};
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
  if (data && !source.empty() && source != to_string(scenario::DataSource::kReal)) {
    throw UsageError("dbh train: --source " + source + ": expected no --source with --data (a dataset is real data), got both");
  }
  if (data && source.empty()) out.push_back(scenario::override_text(DBH_SCENARIO_KEY(data.source), to_string(scenario::DataSource::kReal)));
  for (const auto& [flag, value] : o.given) out.push_back(scenario::override_text(flag_named(flag).key, value));
  return out;
}

namespace {

[[noreturn]] void train_usage(const std::string& key, const std::string& expected, const std::string& got) {
  throw UsageError("dbh train: " + key + ": expected " + expected + ", got " + got);
}

// The scenario the flags describe: they are scenario overrides (Note [One
// training builder]), one set of bounds and defaults for `dbh train` and
// `dbh run`. Errors speak of the flags. Throws UsageError.
scenario::Scenario train_scenario(const TrainCommandOptions& o) {
  scenario::Scenario s;
  try {
    // dbh's own keys: no file, no includes, no aliases to translate.
    Value tree;
    for (const auto& kv : train_overrides(o)) apply_override(tree, kv);
    s = scenario::decode_scenario(tree, "");
    scenario::check_scenario_inputs(s, tree);
  } catch (const ScenarioError& e) {
    throw UsageError(in_flag_terms(e.what(), o.given));
  }
  s.name = "train";
  return s;
}

// A file of another architecture (or not of dbh) is the user's to fix.
[[noreturn]] void load_error(const std::string& key, const std::string& path, const std::string& arch,
                             const std::exception& e) {
  std::string what = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) what = c10->what_without_backtrace();
  what = one_line(what.substr(0, what.find('\n')));
  train_usage(key + " " + path, "a file of " + arch + " (--encoder, --decoder)", "one that does not load: " + what);
}

// --weights: a weights file or a dbh checkpoint (its model part), as `dbh
// eval` reads them: DbNet::load_weights finds nothing in a checkpoint.
void load_train_weights(model::DbNet& dbnet, const scenario::Scenario& s, const TrainCommandOptions& o, const std::string& arch) {
  model::ModelStateReport state;
  try {
    state = model::load_model_state(dbnet, s.model.weights);
  } catch (const std::exception& e) {
    load_error("--weights", s.model.weights, arch, e);
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
    train_usage("--weights " + s.model.weights, "a file holding tensors of " + arch + " (--encoder, --decoder)",
                n == 0 ? "one none of whose entries has a name and shape of that model"
                       : "a file of another model (" + state.summary() + ")");
  }
  if (static_cast<size_t>(n) < total) {
    if (!o.allow_partial) {
      train_usage("--weights " + s.model.weights,
                  "a file holding every tensor of " + arch + " (--encoder, --decoder; --allow-partial to train from part)",
                  "a part of it (" + state.summary() + ")");
    }
    std::cerr << "warning: --weights " << s.model.weights << ": loaded " << n << " of " << total << " tensors of "
              << arch << "; the others keep their initial values (" << state.summary() << ")\n";
  }
  if (!o.quiet) std::cout << "loaded " << n << " tensors from " << s.model.weights << "\n";
}

// --resume: the trainer continues from the checkpoint, which must leave
// something to train ("0 steps, loss 0 -> 0" would be a result nobody
// measured).
void resume_training(model::Trainer& trainer, const scenario::Scenario& s, const std::string& arch) {
  try {
    trainer.load_checkpoint(s.train.resume_from);
  } catch (const std::exception& e) {
    load_error("--resume", s.train.resume_from, arch, e);
  }
  // Note [Nothing left to train], said in the flags' terms.
  if (const auto last = worker::nothing_left_to_train(s, trainer.next_step())) {
    train_usage("--steps", "more than the " + std::to_string(trainer.next_step()) + " steps --resume " +
                               s.train.resume_from + " has already trained",
                std::to_string(last->step));
  }
}

// The batches training reads, and how the summary describes them.
struct TrainData {
  model::BatchSource source;
  std::string description;
};

// The dataset's loader (a dataset with defects its policy cannot help is
// the user's to fix, listed), or synthetic batches.
TrainData open_train_data(const scenario::Scenario& s) {
  TrainData data{{}, to_string(s.data.source)};
  std::shared_ptr<model::Loader> loader;
  if (worker::uses_dataset(s)) {
    std::shared_ptr<model::Dataset> dataset;
    try {
      dataset = std::make_shared<model::Dataset>(worker::dataset_options(s, s.data.path));
    } catch (const model::DataError& e) {
      for (const auto& d : e.defects()) std::cerr << "  " << one_line(d.message) << "\n";
      // A policy only helps with defects of single words or images: not an
      // unreadable file, a duplicate or a name leaving the dataset.
      const bool policy_helps = std::none_of(e.defects().begin(), e.defects().end(), [](const model::Defect& d) {
        return model::refuses_dataset(d.kind) || d.kind == model::DefectKind::kUnreadableFile;
      });
      train_usage("--data " + s.data.path,
                  std::string("a dataset without defects") + (policy_helps ? " (or --on-invalid skip|clip)" : ""),
                  std::to_string(e.defects().size()) + " defect(s), listed above");
    }
    for (const auto& d : dataset->defects()) std::cerr << "warning: " << one_line(d.message) << "\n";
    loader = std::make_shared<model::Loader>(dataset, worker::loader_options(s));
    data.description = s.data.source == scenario::DataSource::kSyntheticRender
                           ? "synthetic_render (" + std::to_string(dataset->size()) + " rendered images)"
                           : "real (" + s.data.path + ", " + std::to_string(dataset->size()) + " images, " +
                                 dataset->format() + ")";
  }
  data.source = worker::make_batch_source(s, loader);  // the source owns the loader
  return data;
}

// --val-data: its images, read as the worker reads them (Note [One
// validation]); a set the policy cannot help is the user's to fix.
worker::ValidationSet open_train_validation(const scenario::Scenario& s) {
  if (s.data.val.path.empty()) return {};
  std::vector<std::string> warnings;
  worker::ValidationSet v;
  try {
    v = worker::open_validation_set(s, warnings);
  } catch (const model::DataError& e) {
    for (const auto& d : e.defects()) std::cerr << "  " << one_line(d.message) << "\n";
    train_usage("--val-data " + s.data.val.path, "a validation dataset with annotated, readable images",
                std::to_string(e.defects().size()) + " defect(s), listed above");
  }
  for (const auto& w : warnings) std::cerr << "warning: " << one_line(w) << "\n";
  return v;
}

// metrics.csv (Note [One metrics.csv]): created anew, never written through a link left in the
// folder (files.h, Note [Never through a link]); written a row at a time, so
// it can be followed while training runs.
class MetricsCsv {
 public:
  explicit MetricsCsv(fs::path path) : path_(std::move(path)), fd_(create_file_no_follow(path_.string())) {
    if (fd_ < 0) {
      throw ReportError(path_.string() + ": expected a file dbh can create, got an error (" + std::strerror(errno) +
                        ")");
    }
    write(report::metrics_csv_header());
  }
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;
  ~MetricsCsv() {
    if (fd_ >= 0) ::close(fd_);
  }
  // The row of step `r` and the validation after it (Note [One metrics.csv]:
  // the columns `dbh run` writes).
  void add(const model::StepResult& r, const supervisor::EvalRecord* eval) {
    supervisor::StepRecord step;
    step.step = r.step;
    step.loss = r.loss, step.bce = r.bce, step.l1 = r.l1, step.dice = r.dice;
    step.lr = r.lr, step.grad_norm = r.grad_norm, step.seconds = r.seconds;
    step.skipped = r.skipped, step.loss_scale = r.loss_scale;
    step.loss_bits = r.loss_bits;
    step.rss_bytes = monitors::current_rss_bytes();
    write(report::metrics_csv_row(step, eval));
  }
  // Closes the file; throws ReportError when a write failed.
  void close() {
    if (error_ == 0 && ::close(fd_) != 0) error_ = errno;
    fd_ = -1;
    if (error_ != 0) {
      throw ReportError(path_.string() + ": expected a writable file, got a write error (" + std::strerror(error_) +
                        ")");
    }
  }

 private:
  void write(const std::string& text) {
    if (error_ == 0) error_ = write_all(fd_, text.data(), text.size());
  }
  fs::path path_;
  int fd_ = -1;
  int error_ = 0;
};

void stop_check() {
  if (const int signal_number = supervisor::stop_requested()) throw supervisor::Interrupted(signal_number);
}

// What run_steps trained, and the last validation (none without
// --val-data and --eval-every).
struct TrainedSteps {
  std::vector<model::StepResult> steps;
  std::optional<supervisor::EvalRecord> last_eval;
};

// The steps up to the last (Note [One training session]: the worker's
// loop, checkpoints and validation cadence): a progress line and a row of
// metrics.csv each. Stops between steps when a stop is requested
// (Interrupted); a batch the data policy refuses is bad input.
TrainedSteps run_steps(model::DbNet& net, model::Trainer& trainer, const model::BatchSource& source,
                       const worker::ValidationSet& validation, const scenario::Scenario& s, const TrainCommandOptions& o,
                       const fs::path& out, MetricsCsv& csv) {
  TrainedSteps trained;
  const int64_t steps = s.train.last_step();
  worker::StepHooks hooks;
  hooks.before_step = [](int64_t) { stop_check(); };
  hooks.after_step = [&](const model::StepResult& r) {
    trained.steps.push_back(r);
    if (o.quiet) return;
    std::cout << "step " << std::setw(4) << r.step + 1 << "/" << steps << "  loss " << std::fixed
              << std::setprecision(4) << r.loss << " (bce " << r.bce << ", l1 " << r.l1 << ", dice " << r.dice
              << ")  lr " << std::setprecision(5) << r.lr << "  |g| " << std::setprecision(3) << r.grad_norm
              << "  " << std::setprecision(2) << r.seconds << " s" << std::defaultfloat
              << std::endl;  // flushed: logs show progress
  };
  hooks.step_done = [&](const model::StepResult& r, const worker::ValidationResult* v) {
    std::optional<supervisor::EvalRecord> eval;
    if (v != nullptr) {
      eval = supervisor::EvalRecord{};
      eval->run = 0, eval->step = r.step + 1;
      eval->precision = v->eval.precision.value_or(0), eval->recall = v->eval.recall.value_or(0);
      eval->hmean = v->eval.hmean.value_or(0);
      eval->gt = v->eval.gt, eval->det = v->eval.det, eval->matched = v->eval.matched, eval->images = v->eval.images;
      eval->seconds = v->eval.seconds;
      trained.last_eval = eval;
      if (!o.quiet) {
        std::cout << "validation after step " << eval->step << ": hmean " << std::fixed << std::setprecision(4)
                  << eval->hmean << " (precision " << eval->precision << ", recall " << eval->recall << ") on "
                  << eval->images << " images, " << std::setprecision(1) << eval->seconds << " s"
                  << std::defaultfloat << std::endl;
      }
    }
    csv.add(r, eval ? &*eval : nullptr);
  };
  try {
    worker::train_steps(net, trainer, source, validation, s, worker::SessionSite{0, out.string(), nullptr}, hooks);
  } catch (const model::DataError& e) {
    throw UsageError("dbh train: step " + std::to_string(trainer.next_step()) + ": " + e.what());
  } catch (const worker::CheckpointWriteError& e) {
    throw ReportError(e.what());
  }
  return trained;
}

// summary.json: what trained (as a scenario: `dbh run` with these keys
// trains the same), on what, and how the losses went.
nlohmann::ordered_json train_summary(const scenario::Scenario& s, const std::string& data_desc, const TrainedSteps& trained,
                                     double wall, const nlohmann::json& choices) {
  const std::vector<model::StepResult>& results = trained.steps;
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
  if (trained.last_eval) {
    const supervisor::EvalRecord& e = *trained.last_eval;
    summary["last_validation"] = {{"step", e.step},          {"hmean", e.hmean},   {"precision", e.precision},
                                  {"recall", e.recall},      {"images", e.images}, {"gt", e.gt},
                                  {"det", e.det},            {"matched", e.matched}};
  }
  summary["scenario"] = nlohmann::json::parse(scenario::resolved_json(s));
  if (!choices.is_null()) summary["measured_choices"] = choices;
  summary["environment"] = nlohmann::json::parse(env::environment_json(env::collect_environment()));
  return summary;
}

}  // namespace

int run_train_command(const TrainCommandOptions& o) {
  // Input checks first: bad input leaves nothing behind.
  scenario::Scenario s = train_scenario(o);
  const fs::path out = o.out.empty() ? fs::path(default_output_folder("train")) : fs::path(o.out);
  // The output folder is claimed as every command's is: a user's folder (a
  // dataset, another command's results) is refused, a second dbh on it is
  // locked out, and on any error or interruption (SIGINT, SIGTERM: checked
  // between steps) what this command wrote is removed.
  supervisor::install_stop_handlers();
  // The training dataset when it is read (not for synthetic data), the validation one always.
  check_outside_datasets("dbh train", "--out", out.string(),
                         worker::uses_dataset(s) ? scenario::dataset_folders(s) : std::vector<std::string>{s.data.val.path});
  // Weights or a checkpoint read from this folder stay where they are.
  OutputDir claim(out, "train", OutputDir::Reuse::kReplace, {s.model.weights, s.train.resume_from});
  // `auto` layout and threads: measured once per machine and setup, as for
  // `dbh run` (Note [Measured choices]).
  const nlohmann::json choices = supervisor::resolve_measured_choices(s, (out / "tuning").string());
  stop_check();
  if (!o.quiet && !choices.is_null()) {
    std::cout << terminal_text(report::measured_choices_line(choices)) << "\n";
  }

  model::DbNet dbnet = worker::make_net(s);
  const std::string arch = "resnet" + std::to_string(s.model.encoder) + " + " + model::to_string(s.model.decoder);
  if (!s.model.weights.empty()) load_train_weights(dbnet, s, o, arch);
  model::Trainer trainer(dbnet, worker::train_options(s));
  if (!s.train.resume_from.empty()) resume_training(trainer, s, arch);
  const TrainData data = open_train_data(s);
  const worker::ValidationSet validation = open_train_validation(s);

  if (!o.quiet) {
    std::cout << "dbh train: " << arch << ", data " << data.description << ", batch " << s.data.batch_size << "x"
              << s.train.accumulation << ", " << s.data.size << "x" << s.data.size << ", " << s.train.max_steps
              << " steps, " << model::to_string(s.train.optimizer) << " lr " << s.train.lr << ", "
              << model::to_string(s.train.precision) << " on " << s.hardware.device << ", seed " << s.train.seed
              << "\n";
  }
  MetricsCsv csv(out / "metrics.csv");
  const auto t0 = std::chrono::steady_clock::now();
  const TrainedSteps trained = run_steps(dbnet, trainer, data.source, validation, s, o, out, csv);
  const std::vector<model::StepResult>& results = trained.steps;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop_check();
  try {
    worker::save_checkpoint_file(trainer, (out / "checkpoint-final.pt").string());
  } catch (const worker::CheckpointWriteError& e) {
    throw ReportError(e.what());
  }
  csv.close();
  const nlohmann::ordered_json summary = train_summary(s, data.description, trained, wall, choices);
  write_file_atomically((out / "summary.json").string(),
                        summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  stop_check();
  claim.commit();
  std::cout << "dbh train: " << results.size() << " steps in " << std::fixed << std::setprecision(1)
            << wall << " s, loss " << std::setprecision(4)
            << (results.empty() ? 0.0 : results.front().loss) << " -> "
            << (results.empty() ? 0.0 : results.back().loss) << "\n"
            << "output: " << fs::absolute(out).string() << " (metrics.csv, summary.json, checkpoint-final.pt"
            << (s.train.checkpoint_every > 0 ? ", checkpoint-r0-s<step>.pt every " +
                                                   std::to_string(s.train.checkpoint_every) + " steps"
                                             : std::string())
            << ")\n";
  return summary["all_losses_finite"].get<bool>() ? 0 : 1;
}

}  // namespace dbh::harness::cli
