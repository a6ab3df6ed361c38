#include "model/eval/evaluation.h"

namespace dbh::model {

std::string to_string(MatchStatus status) {
  switch (status) {
    case MatchStatus::kMatched:
      return "matched";
    case MatchStatus::kUnmatched:
      return "unmatched";
    case MatchStatus::kDontCare:
      return "dont_care";
    case MatchStatus::kInvalid:
      return "invalid";
  }
  return "invalid";
}

std::string ModelStateReport::summary() const {
  auto first = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
    return out + (names.size() > 3 ? ", … (" + std::to_string(names.size()) + " in all)" : "");
  };
  std::string out = std::to_string(loaded) + " tensors loaded";
  if (!missing.empty()) out += "; missing: " + first(missing);
  if (!mismatched.empty()) out += "; another shape: " + first(mismatched);
  if (!unexpected_model.empty()) out += "; tensors of a larger model: " + first(unexpected_model);
  return out;
}

}  // namespace dbh::model
