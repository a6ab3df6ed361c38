#pragma once

#include <vector>

#include "harness/kb/knowledge_base.h"
#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/event_digest.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"

namespace dbh::testing {

/// A trial as a unit test builds it: how its process ended and the events
/// its worker sent, in order.
struct RecordedTrial {
  harness::supervisor::TrialResult result;
  std::vector<harness::proto::Event> events;
};

/// The scenario hash a recorded `hello` gives for "the scenario the trial is
/// classified with", as a worker's hello names the one dbh passed it (Note
/// [A pass names its scenario]): classify() puts that scenario's hash there.
inline constexpr const char* kTheScenarioHash = "the-scenario";

/// harness::classify() of `t`, its events fed in order to an EventDigester
/// as a running trial feeds them.
inline harness::supervisor::TrialAnalysis classify(const RecordedTrial& t, const harness::scenario::Scenario& s,
                                       const harness::kb::KnowledgeBase& kb, const harness::supervisor::ClassifyOptions& o = {}) {
  harness::supervisor::EventDigester digester;
  for (harness::proto::Event e : t.events) {
    if (e.type == harness::proto::event::kHello && e.body.value("scenario_hash", "") == kTheScenarioHash) {
      e.body["scenario_hash"] = harness::scenario::scenario_hash(s);
    }
    digester.feed(e);
  }
  return harness::supervisor::classify(t.result, digester, s, kb, o);
}

}  // namespace dbh::testing
