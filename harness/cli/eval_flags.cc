// `dbh eval`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/eval_command.h"
#include "harness/scenario/schema.h"
#include "model/choices.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_eval(CLI::App& app) {
  auto ev = std::make_shared<EvalCommandOptions>();
  auto* cmd = app.add_subcommand(
      "eval", "Score a checkpoint on a dataset (ICDAR 2015 P/R/H), with overlays of the worst images. "
              "Exit 0 when the evaluation ran, 2 bad input");
  cmd->add_option("--weights", ev->weights, "dbh checkpoint (checkpoint-*.pt) or weights file")->required();
  cmd->add_option("--data", ev->data, "Dataset folder (images/ + annotations.json or icdar/)")->required();
  cmd->add_option("--out", ev->out, "Output folder (default reports/runs/eval-<time>)");
  cmd->add_option("--encoder", ev->encoder, "Encoder the weights were trained with")
      ->check(CLI::IsMember({"resnet18", "resnet34", "resnet50", "18", "34", "50"}))->capture_default_str();
  cmd->add_option("--decoder", ev->decoder, "Decoder the weights were trained with")
      ->check(CLI::IsMember(model::decoder_kind_names()))->capture_default_str();
  cmd->add_option("--size", ev->size, "Test-time size of the --side side (multiple of 32)")->capture_default_str();
  cmd->add_option("--side", ev->side, "Side resized to --size (aspect kept, padded to multiples of 32)")
      ->check(CLI::IsMember(model::resize_side_names()))->capture_default_str();
  cmd->add_option("--batch-size", ev->batch_size, "Images per forward pass (images of one input size)")
      ->capture_default_str();
  cmd->add_option("--thresh", ev->binarize_thresh, "Probability threshold of the text bitmap")->capture_default_str();
  cmd->add_option("--box-thresh", ev->box_thresh, "Minimum mean probability of a box")->capture_default_str();
  cmd->add_option("--unclip-ratio", ev->unclip_ratio, "Unclip ratio r'")->capture_default_str();
  cmd->add_option("--max-candidates", ev->max_candidates, "Contours considered per image")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--iou-thresh", ev->iou_thresh, "IoU a match must exceed")->capture_default_str();
  cmd->add_option("--on-invalid", ev->on_invalid, "What to do with invalid annotations")
      ->check(CLI::IsMember(model::on_invalid_names()))->capture_default_str();
  cmd->add_option("--threads", ev->threads, "Intra-op threads; 0 = all cores")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--device", ev->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--overlays", ev->overlays, "Overlays of the K images with the lowest H-mean")
      ->capture_default_str();
  cmd->add_flag("--allow-partial", ev->allow_partial,
                "Evaluate even when some parameters or buffers are missing from the weights (listed)");
  cmd->add_option("--save-weights", ev->save_weights,
                  std::string("Also write the loaded model as a plain weights file (for ") +
                      DBH_SCENARIO_KEY(model.weights) + ", train --weights)");
  cmd->add_flag("-q,--quiet", ev->quiet, "Print only the overall result");
  return {cmd, [ev] { return run_eval_command(*ev); }};
}

}  // namespace dbh::harness::cli
