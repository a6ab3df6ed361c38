// Note [A trial's events are read as they arrive]: the supervisor keeps what
// a trial's events say within stated budgets, whatever a worker sends. A
// stream built to grow every list the records hold is fed to an
// EventDigester; what it keeps is measured against those budgets.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/proto/events.h"
#include "harness/supervisor/event_digest.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

proto::Event Ev(const std::string& type, json fields) {
  return proto::decode_event(proto::encode_event(type, std::move(fields), 0.5), "test");
}

// The bytes a record's variable parts hold (strings, lists, JSON as text).
size_t held_bytes(const supervisor::TrialAnalysis& a) {
  size_t bytes = 0;
  for (const auto& st : a.steps) {
    bytes += sizeof(supervisor::StepRecord) + st.micro_loss_bits.size() * 4 + st.phases.dump().size();
    for (const auto& m : st.modules) bytes += sizeof(m) + m.module.size();
  }
  for (const auto& e : a.evals) {
    bytes += sizeof(supervisor::EvalRecord);
    for (const auto& [name, v] : e.metrics) bytes += name.size() + sizeof(v) + sizeof(name);
  }
  for (const auto& [step, ids] : a.batches) {
    for (const auto& id : ids) bytes += id.size() + sizeof(id);
  }
  for (const auto& [index, name] : a.sample_names) bytes += name.size() + sizeof(index) + sizeof(name);
  bytes += a.samples_read.size() * sizeof(int64_t);
  for (const auto& w : a.warnings) bytes += w.size();
  return bytes;
}

TEST(EventDigesterTest, KeepsBoundedRecordsWhateverTheStream) {
  supervisor::EventDigester d;
  const std::string long_name(250, 'n');
  json micro = json::array();
  for (int i = 0; i < 2000; ++i) micro.push_back(1056964608);
  json phases = json::object();
  for (int p = 0; p < 40; ++p) {
    json figures = json::object();
    for (int f = 0; f < 40; ++f) figures["figure" + std::to_string(f)] = f;
    figures["note"] = long_name;
    phases["phase" + std::to_string(p)] = figures;
  }
  json numerics = json::array();
  for (int m = 0; m < 512; ++m) numerics.push_back({{"module", long_name + std::to_string(m)}, {"act", 1.0}});
  json metrics = json::object();
  for (int m = 0; m < 200; ++m) metrics[long_name + std::to_string(m)] = 0.5;
  json samples = json::array();
  for (int s = 0; s < 500; ++s) samples.push_back(long_name + std::to_string(s));
  // Each event decoded once, as the worker's stream would carry it, then fed
  // again at every step with only its step changed.
  proto::Event end = Ev(proto::event::kStepEnd, {{"run", 0}, {"step", 0}, {"loss", 0.5}, {"lr", 0.1}, {"micro_loss_bits", micro},
                                   {"phases", phases}, {"numerics", numerics}});
  proto::Event eval = Ev(proto::event::kEval, {{"run", 0}, {"step", 0}, {"metrics", metrics}});
  proto::Event batch = Ev(proto::event::kBatch, {{"run", 0}, {"step", 0}, {"samples", samples}});
  proto::Event read = Ev(proto::event::kSampleRead, {{"index", 0}, {"name", long_name}});
  const proto::Event warning = Ev(proto::event::kWarning, {{"message", long_name}});
  proto::Event error = Ev(proto::event::kError, {{"kind", "exception"}, {"run", 0}, {"step", 0}, {"message", long_name}});
  const int64_t steps = 1200;
  for (int64_t step = 0; step < steps; ++step) {
    for (proto::Event* e : {&end, &eval, &batch, &error}) e->body["step"] = step;
    read.body["index"] = step;
    for (const proto::Event* e : std::initializer_list<const proto::Event*>{&end, &eval, &batch, &read, &warning, &error}) {
      d.feed(*e);
    }
  }
  const supervisor::TrialAnalysis& a = d.records();
  EXPECT_EQ(a.steps_completed, steps);
  ASSERT_EQ(a.steps.size(), static_cast<size_t>(steps));
  EXPECT_EQ(a.steps[0].micro_loss_bits.size(), supervisor::kMaxMicroBatchBits);
  EXPECT_LE(a.steps[0].phases.size(), supervisor::kMaxPhases);
  EXPECT_LE(a.steps[0].phases.begin()->size(), supervisor::kMaxPhaseFigures);
  size_t modules = 0;
  for (const auto& st : a.steps) modules += st.modules.size();
  EXPECT_LE(modules, supervisor::kMaxModuleRecords);
  EXPECT_LE(a.evals.size(), supervisor::kMaxEvalRecords);
  EXPECT_LE(a.warnings.size(), supervisor::internal::kMaxQuotedItems);
  EXPECT_LE(d.digest().other_errors.size(), supervisor::internal::kMaxQuotedItems);
  size_t micro_kept = 0;
  for (const auto& st : a.steps) micro_kept += st.micro_loss_bits.size();
  EXPECT_LE(micro_kept, supervisor::kMaxMicroBatchBitsKept);
  EXPECT_LE(a.batches.size(), supervisor::kMaxSampleTextBytes / (500 * 250) + 1);
  // The stream carried about 1.2 GB as JSON; the records keep under 100 MB.
  EXPECT_LT(held_bytes(a), size_t{100} << 20) << held_bytes(a);
  // The schedule is still read from every step.
  ASSERT_EQ(d.digest().run_steps.count(0), 1u);
  EXPECT_EQ(d.digest().run_steps.at(0).count, steps);
  EXPECT_TRUE(d.digest().run_steps.at(0).in_order);
}

// Past kMaxStepRecords steps a step is counted and checked against the
// schedule, but not kept.
TEST(EventDigesterTest, CountsStepsPastTheRecordsItKeeps) {
  supervisor::EventDigester d;
  const auto n = static_cast<int64_t>(supervisor::kMaxStepRecords) + 10;
  for (int64_t step = 0; step < n; ++step) {
    d.feed(Ev(proto::event::kStepEnd, {{"run", 0}, {"step", step == 40000 ? step + 1 : step}, {"loss", 0.5}, {"lr", 0.1}}));
  }
  EXPECT_EQ(d.records().steps.size(), supervisor::kMaxStepRecords);
  EXPECT_EQ(d.records().steps_completed, n);
  EXPECT_EQ(d.digest().run_steps.at(0).count, n);
  EXPECT_FALSE(d.digest().run_steps.at(0).in_order) << "step 40000 was reported as 40001";
}

}  // namespace
}  // namespace dbh::harness
