#pragma once

#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::qualify {

struct QualifyOptions {
  std::string scenario;
  std::vector<std::string> overrides;
  std::string profile;   // hardware profile name
  std::string budget;    // explicit budget instead of the profile's memory
  int64_t steps = 3;     // steps each trial must train stably
  double margin = 0.10;  // safety margin kept free of the budget
  std::string out;
  std::string cache_dir;
  bool quiet = false;
  /// A GPU profile qualified on the CPU: measure host memory and say on every
  /// page that it is an estimate (without it, refused).
  bool host_estimate = false;
  /// A numerics reference recorded on the source machine (`dbh repeat
  /// --record`): the same steps are repeated here and compared (Note [A
  /// numerics reference]).
  std::string reference;
  scenario::InputChecks checks;  // what loading the scenario checks beyond its keys
};

/// `dbh qualify SCENARIO --profile NAME`: for each precision, the largest
/// batch that trains `steps` steps stably within the profile's memory minus
/// the margin; a recommendation keeping the source's effective batch
/// (batch × accumulation), confirmed by its own run; a Hardware Qualification
/// Report. With `reference`, the numerics half too: the reference's steps
/// repeated here and compared. Exit 0 when every half asked qualifies, 1
/// when one does not, 2 on bad input.
int qualify_command(const QualifyOptions& options);

}  // namespace dbh::harness::qualify
