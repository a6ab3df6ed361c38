#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dbh::harness::scenario {

// Note [dbh's keys in your configuration]: `dbh scenario from-command
// --external` asks the user's command for its composed configuration (the
// `config` of its `hello` in describe mode) and finds, for each key dbh
// passes, the user's key that holds it: by its name (the last part of the
// dotted key: `per_step`, `step_size`, `updates` are names a training gives a
// batch size, a learning rate, a number of steps) and by what it holds (a
// learning rate is a real number, a batch size a positive integer, a dataset
// an existing folder). A key of a validation or test section never stands
// for the training's. When several keys fit, one the command line sets wins;
// otherwise none is chosen and the candidates are listed. The scenario then
// holds the configuration's values (what the training reads when run as
// written) and passes each back under the user's name through worker.keys;
// a dbh key nothing holds is passed as nothing ("").

/// One key of a composed configuration, dotted, with its value.
using ConfigEntry = std::pair<std::string, nlohmann::json>;

/// Where one dbh key lives in the user's configuration.
struct KeyMapping {
  std::string dbh_key;
  std::string user_key;  // "" when no key of the configuration holds it: dbh passes nothing
  nlohmann::json value;  // the scenario's value (dbh's spelling), null when unmapped
  std::string why;       // how it was matched, or why not
};

/// The dbh keys from-command maps: those dbh passes to a worker, and the
/// training keys a resolution or rung may change (train.grad_clip,
/// train.momentum, train.weight_decay, data.size).
const std::vector<std::string>& mappable_keys();

/// Maps each of mappable_keys() into `config` (Note [dbh's keys in your
/// configuration]); `command_keys` are the keys the command line sets,
/// `folders` those a relative dataset path is read from, in order (the
/// command's working folder, its script's).
std::vector<KeyMapping> map_user_config(const std::vector<ConfigEntry>& config,
                                        const std::vector<std::string>& command_keys,
                                        const std::vector<std::string>& folders);

}  // namespace dbh::harness::scenario
