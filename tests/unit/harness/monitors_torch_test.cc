// Monitors: the first non-finite site of a step in execution order (batch →
// module outputs in forward order → loss parts → gradients in backward order)
// is the one a failure is attributed to, in cheap and in localise mode, and a
// finite step reports nothing (Note [Cheap and localise monitors] in
// harness/monitors/monitors.h). The hooks are fed as model::Trainer::step and
// model::run_module call them, with small tensors and a shared DBNet for the
// gradients; what the monitors report is read back from their event stream.
#include "harness/monitors/monitors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "harness/proto/event_types.h"
#include "model/data/batch.h"
#include "tests/support/events.h"
#include "tests/support/small_model.h"

namespace dbh::harness {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kRun = 2;  // the in-process run the monitors are told of

// The module names a forward pass of the FPN model reports, in forward order.
const std::vector<std::string> kForwardOrder = {
    "encoder.stem",     "encoder.layer1",   "encoder.layer2",   "encoder.layer3",   "encoder.layer4",
    "decoder.lateral5", "decoder.lateral4", "decoder.lateral3", "decoder.lateral2", "decoder.smooth5",
    "decoder.smooth4",  "decoder.smooth3",  "decoder.smooth2",  "decoder.fusion",   "head.prob.conv",
    "head.prob.up1",    "head.prob.up2",    "head.thresh.conv", "head.thresh.up1",  "head.thresh.up2",
    "head.binarize"};

// What one training step hands the monitors.
struct StepFeed {
  model::Batch batch;
  std::vector<std::pair<std::string, torch::Tensor>> outputs;  // in forward order
  model::DbLossParts loss;
  std::vector<std::pair<std::string, float>> gradients;  // parameter → value; the others undefined
};

// A healthy step: a learnable synthetic batch, finite outputs, losses and
// gradients (three parameters, from the encoder to the head).
StepFeed finite_feed() {
  StepFeed f;
  f.batch = model::synthetic_boxes_batch(2, 32, 32, 5);
  torch::manual_seed(3);
  for (const auto& name : kForwardOrder)
    f.outputs.emplace_back(name, torch::rand({2, 4, 8, 8}));
  f.loss.total = torch::tensor(1.5f);
  f.loss.bce = torch::tensor(0.4f);
  f.loss.l1 = torch::tensor(0.05f);
  f.loss.dice = torch::tensor(0.6f);
  f.gradients = {
      {"encoder.layer3.1.conv2.weight", 0.01f}, {"decoder.fusion.conv.weight", 0.01f}, {"head.prob.up2.weight", 0.01f}};
  return f;
}

torch::Tensor& output_of(StepFeed& f, const std::string& module) {
  for (auto& [name, t] : f.outputs) {
    if (name == module) return t;
  }
  throw std::invalid_argument("no output " + module);
}

void set_gradient_value(StepFeed& f, const std::string& parameter, float value) {
  for (auto& [name, v] : f.gradients) {
    if (name == parameter) {
      v = value;
      return;
    }
  }
  f.gradients.emplace_back(parameter, value);
}

// Feeds `feed` through every hook in the order the trainer calls them;
// `reached` names the last hook called (the one that threw, if one did).
void run_step(monitors::Monitors& m, int64_t step, StepFeed& feed, std::string* reached) {
  auto& net = testing::shared_dbnet();
  testing::clear_gradients(net);
  *reached = "on_step_begin";
  m.on_step_begin(step);
  *reached = "on_batch";
  m.on_batch(step, feed.batch);
  for (auto& [name, out] : feed.outputs) {
    *reached = "on_output " + name;
    m.on_enter(name);
    m.on_output(name, out);
  }
  model::DbNetOutput out;
  out.probability = torch::full({2, 1, 32, 32}, 0.5f);
  out.threshold = torch::full({2, 1, 32, 32}, 0.4f);
  out.binary = torch::full({2, 1, 32, 32}, 0.5f);
  *reached = "on_forward";
  m.on_forward(step, out);
  *reached = "on_loss";
  m.on_loss(step, feed.loss);
  for (const auto& [parameter, value] : feed.gradients)
    testing::set_gradient(net, parameter, value);
  *reached = "on_before_optimizer";
  m.on_before_optimizer(step, net);
  *reached = "on_grad_norms";
  m.on_grad_norms(step, testing::gradient_norms(net));
  model::StepResult r;
  r.step = step;
  r.loss = feed.loss.total.item<double>();
  *reached = "on_step_end";
  m.on_step_end(step, r);
  *reached = "done";
}

class MonitorsTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::clear_gradients(testing::shared_dbnet()); }

  monitors::Monitors make(monitors::Monitors::Mode mode) {
    monitors::Monitors m(mode, events_.writer(), /*loss_spike_factor=*/0);
    m.set_run(kRun);
    return m;
  }
  // Runs healthy steps 0..last-1, then `bad` at step `last`; returns the hook
  // the divergence stopped in ("done" when none did).
  std::string run_until(monitors::Monitors& m, int64_t last, StepFeed bad) {
    std::string reached;
    for (int64_t step = 0; step < last; ++step) {
      StepFeed ok = finite_feed();
      run_step(m, step, ok, &reached);
    }
    try {
      run_step(m, last, bad, &reached);
    } catch (const monitors::DivergedError& e) {
      error_ = e.what();
      return reached;
    }
    return "done";
  }
  std::vector<proto::Health> health() const { return events_.all(proto::health_from); }

  testing::EventCapture events_;
  std::string error_;
};

// One primary `finite` health event, attributed to `kind`/`site`/`module`.
void expect_finite_failure(const std::vector<proto::Health>& h, const char* mode, int64_t step, const std::string& kind,
                           const std::string& site, const std::string& module) {
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].check, "finite");
  EXPECT_EQ(h[0].run, kRun);
  EXPECT_EQ(h[0].step, step);
  EXPECT_EQ(h[0].kind, kind);
  EXPECT_EQ(h[0].site, site);
  EXPECT_EQ(h[0].module.value_or("(none)"), module);
  EXPECT_EQ(h[0].mode.value_or("(none)"), mode);
  EXPECT_TRUE(h[0].primary.value_or(false));
}

// ---- Cheap mode: flags queued, read once per step before the optimizer.

TEST_F(MonitorsTest, CheapFiniteStepsReportNothing) {
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  StepFeed last = finite_feed();
  EXPECT_EQ(run_until(m, 3, last), "done") << error_;
  EXPECT_TRUE(health().empty());
  // Each step names its samples, and nothing else is reported.
  const auto batches = events_.all(proto::batch_from);
  ASSERT_EQ(batches.size(), 4u);
  for (int64_t step = 0; step < 4; ++step) {
    EXPECT_EQ(batches[static_cast<size_t>(step)].run, kRun);
    EXPECT_EQ(batches[static_cast<size_t>(step)].step, step);
    EXPECT_EQ(batches[static_cast<size_t>(step)].samples, last.batch.sample_ids);
  }
}

TEST_F(MonitorsTest, CheapAttributesToTheFirstModuleOutputInForwardOrder) {
  StepFeed bad = finite_feed();
  // encoder.layer3 runs before decoder.fusion (and sorts after it): the
  // failure is encoder.layer3's; the later sites count as consequences.
  output_of(bad, "encoder.layer3")[1][2][3][4] = kNaN;
  output_of(bad, "decoder.fusion").fill_(kInf);
  bad.loss.total = torch::tensor(kNaN);
  set_gradient_value(bad, "head.prob.up2.weight", kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  // One synchronisation per step: nothing stops before the flags are read.
  EXPECT_EQ(run_until(m, 4, bad), "on_grad_norms");
  const auto h = health();
  expect_finite_failure(h, "cheap", 4, "activation", "encoder.layer3", "encoder.layer3");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].nonfinite_sites, (nlohmann::json{{"activation", 2}, {"loss", 1}, {"gradient", 1}}));
  EXPECT_NE(error_.find("encoder.layer3"), std::string::npos) << error_;
  EXPECT_NE(error_.find("step 4"), std::string::npos) << error_;
}

TEST_F(MonitorsTest, CheapAttributesTheBatchBeforeTheModules) {
  StepFeed bad = finite_feed();
  // Execution order inside the batch: image, gt_shrink, gt_shrink_mask,
  // gt_thresh, gt_thresh_mask.
  bad.batch.targets.gt_thresh_mask[0][0][1][1] = kNaN;
  bad.batch.targets.gt_thresh[1][0][5][5] = kNaN;
  output_of(bad, "encoder.stem").fill_(kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  EXPECT_EQ(run_until(m, 1, bad), "on_grad_norms");
  const auto h = health();
  expect_finite_failure(h, "cheap", 1, "label", "gt_thresh", "");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].nonfinite_sites, (nlohmann::json{{"label", 2}, {"activation", 1}}));
}

TEST_F(MonitorsTest, CheapAttributesTheInputBeforeItsLabels) {
  StepFeed bad = finite_feed();
  bad.batch.targets.gt_shrink[0][0][0][0] = kNaN;
  bad.batch.image[1][2][31][31] = -kInf;
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  EXPECT_EQ(run_until(m, 0, bad), "on_grad_norms");
  expect_finite_failure(health(), "cheap", 0, "input", "image", "");
}

TEST_F(MonitorsTest, CheapAttributesLossPartsInTheirOrder) {
  StepFeed bad = finite_feed();
  // bce, l1, dice, total: l1 is first, though dice sorts before it.
  bad.loss.dice = torch::tensor(kNaN);
  bad.loss.l1 = torch::tensor(kInf);
  set_gradient_value(bad, "decoder.fusion.conv.weight", kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  EXPECT_EQ(run_until(m, 2, bad), "on_grad_norms");
  const auto h = health();
  expect_finite_failure(h, "cheap", 2, "loss", "l1", "");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].nonfinite_sites, (nlohmann::json{{"loss", 2}, {"gradient", 1}}));
}

TEST_F(MonitorsTest, CheapAttributesGradientsInBackwardOrder) {
  StepFeed bad = finite_feed();
  // The head's gradients are computed first in the backward pass; the
  // encoder's (which sort before them) last.
  set_gradient_value(bad, "encoder.layer3.1.conv2.weight", kNaN);
  set_gradient_value(bad, "head.prob.up2.weight", kNaN);
  set_gradient_value(bad, "encoder.conv1.weight", kInf);
  monitors::Monitors m = make(monitors::Monitors::Mode::kCheap);
  EXPECT_EQ(run_until(m, 3, bad), "on_grad_norms");
  const auto h = health();
  expect_finite_failure(h, "cheap", 3, "gradient", "head.prob.up2.weight", "head.prob.up2");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].nonfinite_sites, (nlohmann::json{{"gradient", 3}}));
}

// ---- Localise mode: every check synchronises and stops at the first.

TEST_F(MonitorsTest, LocaliseFiniteStepsReportNothing) {
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 2, finite_feed()), "done") << error_;
  EXPECT_TRUE(health().empty());
  EXPECT_EQ(events_.all(proto::batch_from).size(), 3u);
}

TEST_F(MonitorsTest, LocaliseStopsAtTheFirstModuleOutputWithItsStatistics) {
  StepFeed bad = finite_feed();
  output_of(bad, "encoder.layer3")[1][2][3][4] = kNaN;
  output_of(bad, "decoder.fusion").fill_(kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 4, bad), "on_output encoder.layer3");
  const auto h = health();
  expect_finite_failure(h, "localise", 4, "activation", "encoder.layer3", "encoder.layer3");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].stats.value("nan", -1), 1);
  EXPECT_EQ(h[0].stats.value("inf", -1), 0);
  EXPECT_EQ(h[0].stats.value("numel", -1), 2 * 4 * 8 * 8);
  EXPECT_EQ(h[0].stats.value("first_bad_index", std::vector<int64_t>{}), (std::vector<int64_t>{1, 2, 3, 4}));
  // The module output that fed it: the last finite one before it.
  EXPECT_EQ(h[0].extra.value("input_module", std::string()), "encoder.layer2");
  EXPECT_TRUE(h[0].nonfinite_sites.is_null());
}

// The first module of a step has the batch as input: never the previous
// step's last module (head.binarize) and its statistics.
TEST_F(MonitorsTest, LocaliseNamesNoInputModuleForTheFirstModule) {
  StepFeed bad = finite_feed();
  output_of(bad, "encoder.stem").fill_(kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 2, bad), "on_output encoder.stem");
  const auto h = health();
  expect_finite_failure(h, "localise", 2, "activation", "encoder.stem", "encoder.stem");
  ASSERT_FALSE(h.empty());
  EXPECT_FALSE(h[0].extra.contains("input_module")) << h[0].extra.dump();
}

TEST_F(MonitorsTest, LocaliseStopsAtTheFirstLabelMap) {
  StepFeed bad = finite_feed();
  bad.batch.targets.gt_thresh_mask[0][0][1][1] = kNaN;
  bad.batch.targets.gt_shrink_mask[1][0][2][3] = kInf;
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 1, bad), "on_batch");
  const auto h = health();
  expect_finite_failure(h, "localise", 1, "label", "gt_shrink_mask", "");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].stats.value("first_bad_index", std::vector<int64_t>{}), (std::vector<int64_t>{1, 0, 2, 3}));
}

TEST_F(MonitorsTest, LocaliseStopsAtTheFirstLossPart) {
  StepFeed bad = finite_feed();
  bad.loss.dice = torch::tensor(kNaN);
  bad.loss.total = torch::tensor(kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 0, bad), "on_loss");
  expect_finite_failure(health(), "localise", 0, "loss", "dice", "");
}

TEST_F(MonitorsTest, LocaliseStopsAtTheFirstGradientInBackwardOrder) {
  StepFeed bad = finite_feed();
  set_gradient_value(bad, "encoder.layer3.1.conv2.weight", kNaN);
  set_gradient_value(bad, "head.prob.up2.weight", kInf);
  monitors::Monitors m = make(monitors::Monitors::Mode::kLocalise);
  EXPECT_EQ(run_until(m, 3, bad), "on_before_optimizer");
  const auto h = health();
  expect_finite_failure(h, "localise", 3, "gradient", "head.prob.up2.weight", "head.prob.up2");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(h[0].stats.value("inf", -1), h[0].stats.value("numel", -2));
}

// Mode off checks nothing, whatever the tensors hold.
TEST_F(MonitorsTest, OffReportsNothing) {
  StepFeed bad = finite_feed();
  output_of(bad, "encoder.layer3").fill_(kNaN);
  bad.loss.total = torch::tensor(kNaN);
  set_gradient_value(bad, "head.prob.up2.weight", kNaN);
  monitors::Monitors m = make(monitors::Monitors::Mode::kOff);
  EXPECT_EQ(run_until(m, 1, bad), "done");
  EXPECT_TRUE(health().empty());
}

// A loss over loss_spike_factor times the median of every earlier step's
// finite loss is a spike (not before three losses are known); the median is
// the upper one of an even count, and a non-finite loss is neither judged
// here nor counted.
TEST_F(MonitorsTest, ALossOverTheFactorTimesTheMedianOfEarlierLossesIsASpike) {
  monitors::Monitors m(monitors::Monitors::Mode::kCheap, events_.writer(), /*loss_spike_factor=*/3.0);
  m.set_run(kRun);
  const double losses[] = {1, 100, 2, 3, 8, kNaN, 10};
  int64_t step = 0;
  for (const double loss : losses) {
    model::StepResult r;
    r.step = step;
    r.loss = loss;
    m.on_step_end(step++, r);
  }
  // Step 1 (100) comes before three losses are known; step 4 (8) is not over
  // 3 × 3, the upper median of {1, 2, 3, 100} (it is over 3 × 2, the lower
  // one); step 6 (10) is over 3 × 3, the median of {1, 2, 3, 8, 100}, the NaN
  // of step 5 counting for nothing.
  const auto h = health();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].check, "loss_spike");
  EXPECT_EQ(h[0].run, kRun);
  EXPECT_EQ(h[0].step, 6);
  EXPECT_EQ(h[0].extra.value("median", 0.0), 3.0);
  EXPECT_DOUBLE_EQ(h[0].extra.value("factor", 0.0), 10.0 / 3.0);
}

}  // namespace
}  // namespace dbh::harness
