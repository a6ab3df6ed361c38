// The hidden worker process `__worker`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/common/files.h"
#include "harness/proto/worker_link.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

// The processes dbh starts itself (hidden): a trial's worker and a tuning run.
Command add_worker(CLI::App& app) {
  struct State {
    std::string scenario, dir;
    int64_t trial = 0;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("__worker", "")->group("");
  cmd->add_option("--scenario", s->scenario)->required();
  cmd->add_option("--run-dir", s->dir)->required();
  cmd->add_option("--trial", s->trial);
  return {cmd, [s] {
            return h::worker::worker_main(h::read_input_file(s->scenario, "a resolved scenario"), s->dir, h::proto::kEventsFd,
                                  s->trial);
          }};
}

// A probe on a node of the cluster (Note [Probes on a cluster]).
Command add_node_probe(CLI::App& app) {
  auto r = std::make_shared<h::probe::NodeProbe>();
  auto* cmd = app.add_subcommand("__probe", "")->group("");
  cmd->add_option("--scenario", r->scenario)->required();
  cmd->add_option("--dir", r->dir)->required();
  cmd->add_option("--trial", r->trial)->required();
  cmd->add_option("--key", r->key)->required();
  cmd->add_option("--hash", r->hash)->required();
  cmd->add_option("--override", r->overrides)->allow_extra_args(false);
  return {cmd, [r] { return h::probe::run_node_probe(*r, h::worker::input_checks()); }};
}

}  // namespace dbh::harness::cli
