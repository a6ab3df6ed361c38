#pragma once

namespace dbh::harness::probe {

/// The verdict of one probe. kUnknown: the probe could not decide (its trial
/// was unresolved); kDifferent: it failed, but not with the failure being
/// bisected (another class, step or file). Searches treat both like git
/// bisect's "skip": neither counts as "fails".
enum class Verdict { kPass, kFail, kUnknown, kDifferent };

/// "pass", "fails", "unknown", "different failure".
const char* to_string(Verdict v);

}  // namespace dbh::harness::probe
