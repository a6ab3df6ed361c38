// FaultInjector: every fault of fault_catalog() that acts in the worker's
// process on tensors or the trainer, driven through its hooks (on_model,
// on_start, on_step_begin, on_enter/on_output, on_batch, on_loss,
// on_before_optimizer) as model::Trainer::step calls them, with FaultConfigs
// read by the scenario loader from YAML (parameters as strings, defaults from
// the catalog). Each test checks the effect on small tensors and that the
// fault fires, with a `fault_fired` event, at its scheduled steps and runs only.
#include "harness/faults/injectors.h"

#include <malloc.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "harness/scenario/fault_catalog.h"
#include "harness/kb/knowledge_base.h"
#include "harness/monitors/monitors.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/scenario.h"
#include "harness/common/value.h"
#include "model/eval/overlay.h"
#include "model/label/label_maps.h"
#include "tests/support/events.h"
#include "tests/support/files.h"
#include "tests/support/small_model.h"
#include "model/observed_modules.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

// Faults tested here, each with the parameters the loader requires (and
// small sizes for the memory faults).
struct TestedFault {
  const char* name;
  const char* required;  // YAML flow-map entries, "" when none
  bool repeats;          // fires at every step of its window (not once at at_step)
};
void PrintTo(const TestedFault& t, std::ostream* os) {
  *os << t.name;
}
const std::vector<TestedFault> kTested = {
    {"nan_input", "", true},
    {"inf_input", "", true},
    {"nan_label", "", true},
    {"nan_activation", "module: decoder.fusion", true},
    {"perturb_activation", "module: decoder.fusion", true},
    {"nan_gradient", "module: decoder.fusion", true},
    {"unstable_binarization", "", false},
    {"loss_scale_overflow", "", true},
    {"lr_spike", "", true},
    {"memory_ballast", "bytes: 4KiB, on: host", false},
    {"cuda_error", "kind: cudnn_execution_failed", true},
    {"nondeterminism", "", true},
    {"leak", "bytes: 4KiB", false},
    {"label_shift", "", true},
    {"label_scale", "", true},
    {"wrong_normalisation", "", true},
    {"lr_freeze", "", true},
    {"label_swap", "", true},
    {"all_dont_care", "", true},
};

// Faults not tested here, and why.
const std::set<std::string> kOutOfScope = {
    "crash",               // raises a signal in this process (tests/integration/death_test.cc)
    "hang",                // never returns from on_step_begin (tests/integration)
    "corrupt_sample",      // acts at on_dataset: CorruptSampleBreaksAPrivateCopyOfARealDatasetOnly below
    "memory_cap",          // sets RLIMIT_DATA on the whole process, this test program included
    "slow_data",           // sleeps in on_batch by design
    "broken_postprocess",  // acts at on_validation: BrokenPostprocessChangesTheValidationsFromAtStepOn below
};

// A new fault must be tested here or named out of scope with a reason.
// Note [Fault registry]: a fault declared in the catalog acts through an
// entry of the injector's registry, and the injector refuses a name it has no
// entry for rather than doing nothing.
TEST(FaultCatalogTest, EveryCatalogFaultHasAnInjectorEntry) {
  for (const auto& spec : scenario::fault_catalog()) EXPECT_TRUE(faults::FaultInjector::has_injector(spec.name)) << spec.name;
  EXPECT_FALSE(faults::FaultInjector::has_injector("no_such_fault"));
  scenario::FaultConfig unknown;
  unknown.name = "no_such_fault";
  testing::EventCapture events;
  EXPECT_THROW(faults::FaultInjector({unknown}, events.writer(), "cpu"), std::logic_error);
}

TEST(FaultCatalogTest, EveryFaultIsTestedOrOutOfScope) {
  std::set<std::string> tested;
  for (const auto& t : kTested) {
    EXPECT_TRUE(tested.insert(t.name).second) << t.name << " listed twice";
    EXPECT_EQ(kOutOfScope.count(t.name), 0u) << t.name << " is both tested and out of scope";
  }
  std::set<std::string> catalog;
  for (const auto& spec : scenario::fault_catalog()) {
    catalog.insert(spec.name);
    EXPECT_TRUE(tested.count(spec.name) + kOutOfScope.count(spec.name) == 1)
        << "fault " << spec.name << " of fault_catalog() is neither tested in " << __FILE__
        << " (kTested) nor listed in kOutOfScope";
  }
  for (const auto& name : tested)
    EXPECT_EQ(catalog.count(name), 1u) << name << " is not in the catalog";
  for (const auto& name : kOutOfScope)
    EXPECT_EQ(catalog.count(name), 1u) << name << " is not in the catalog";
}

// The faults of a scenario whose `faults:` entries are `faults_yaml`, as the
// scenario loader reads them. The scenario around them has steps, runs and
// micro-batches (nondeterminism's micro_batch 1) for any schedule here, and
// the default batch of two (label_swap).
// The faults of a scenario with `settings` (its other sections) and the
// entries `faults_yaml`, as the loader reads them.
const std::string kSettings = "train: {max_steps: 100, accumulation: 2}\nrepeat: {in_process: 2}\n";
std::vector<scenario::FaultConfig> load_faults(const std::string& faults_yaml, const std::string& settings = kSettings) {
  const std::string text = settings + "faults:\n" + faults_yaml;
  return scenario::decode_scenario(parse_yaml(text, "test.yaml"), "test.yaml").faults;
}

// Four 8×8 label maps per sample with one 2×2 text kernel (sample 0: rows
// and columns 3–4, about the centre; 1: rows 1–2, columns 4–5; 2: rows 5–6,
// columns 1–2), its threshold band one pixel around it, and one don't-care
// pixel at (0, 7); a normalised image of distinct values.
model::Batch tiny_batch(int64_t n) {
  const int64_t kRow[] = {3, 1, 5, 3}, kCol[] = {3, 4, 1, 0};
  model::Batch b;
  b.image = torch::linspace(-2.0, 2.0, n * 3 * 8 * 8).view({n, 3, 8, 8});
  b.targets.gt_shrink = torch::zeros({n, 1, 8, 8});
  b.targets.gt_shrink_mask = torch::ones({n, 1, 8, 8});
  b.targets.gt_thresh_mask = torch::zeros({n, 1, 8, 8});
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = kRow[k % 4], c = kCol[k % 4];
    b.targets.gt_shrink[k][0].slice(0, r, r + 2).slice(1, c, c + 2).fill_(1.0);
    b.targets.gt_thresh_mask[k][0].slice(0, r - 1, r + 3).slice(1, std::max<int64_t>(c - 1, 0), c + 3).fill_(1.0);
    b.targets.gt_shrink_mask[k][0][0][7] = 0.0;
    b.sample_ids.push_back("s" + std::to_string(k));
    b.words.push_back(1);
  }
  b.targets.gt_thresh = 0.3 + 0.4 * (b.targets.gt_thresh_mask - b.targets.gt_shrink);
  return b;
}

model::Batch clone(const model::Batch& b) {
  model::Batch c = b;
  c.image = b.image.clone();
  c.targets.gt_shrink = b.targets.gt_shrink.clone();
  c.targets.gt_shrink_mask = b.targets.gt_shrink_mask.clone();
  c.targets.gt_thresh = b.targets.gt_thresh.clone();
  c.targets.gt_thresh_mask = b.targets.gt_thresh_mask.clone();
  return c;
}

bool same(const model::Batch& a, const model::Batch& b) {
  const auto eq = [](const torch::Tensor& x, const torch::Tensor& y) { return torch::equal(x, y); };
  return eq(a.image, b.image) && eq(a.targets.gt_shrink, b.targets.gt_shrink) &&
         eq(a.targets.gt_shrink_mask, b.targets.gt_shrink_mask) && eq(a.targets.gt_thresh, b.targets.gt_thresh) &&
         eq(a.targets.gt_thresh_mask, b.targets.gt_thresh_mask);
}

int64_t count_nan(const torch::Tensor& t) {
  return torch::isnan(t).sum().item<int64_t>();
}

class FaultInjectorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    auto& net = testing::shared_dbnet();
    testing::clear_gradients(net);
    net->set_binarization(model::Binarization::kSigmoid, torch::kFloat32);
  }

  // An injector for `faults_yaml` (the entries of a scenario's `faults:`).
  faults::FaultInjector& arm(const std::string& faults_yaml, const std::string& settings = kSettings) {
    faults_ = load_faults(faults_yaml, settings);
    injector_ = std::make_unique<faults::FaultInjector>(faults_, events_.writer(), "cpu");
    return *injector_;
  }
  faults::FaultInjector& arm_one(const std::string& entries, const std::string& settings = kSettings) {
    return arm("  - {" + entries + "}\n", settings);
  }

  // `batch` after the data hooks of micro-batch 0 of `step`.
  model::Batch batch_at(int64_t step, const model::Batch& batch) {
    model::Batch b = clone(batch);
    injector_->on_step_begin(step);
    injector_->on_batch(step, b);
    return b;
  }
  std::vector<proto::FaultFired> fired() const { return events_.all(proto::fault_fired_from); }

  testing::EventCapture events_;
  std::vector<scenario::FaultConfig> faults_;
  std::unique_ptr<faults::FaultInjector> injector_;
};

// ---- Schedules: at_step, until_step and run, for every tested fault.

class FaultScheduleTest : public FaultInjectorTest, public ::testing::WithParamInterface<TestedFault> {};

// Every hook of one step, as the worker and the trainer call them; a
// `cuda_error` thrown from on_enter ends the step, as it ends a real one.
void run_step(faults::FaultInjector& inj, int64_t step, torch::optim::Optimizer& opt) {
  auto& net = testing::shared_dbnet();
  inj.on_step_begin(step);
  model::Batch b = tiny_batch(2);
  inj.on_batch(step, b);
  try {
    for (const char* module : {"decoder.smooth2", "decoder.fusion", "head.prob.conv"}) {
      inj.on_enter(module);
      torch::Tensor out = torch::ones({2, 4, 8, 8});
      inj.on_output(module, out);
    }
  } catch (const std::runtime_error&) {
    return;
  }
  model::DbLossParts loss{torch::tensor(1.0f), torch::tensor(0.2f), torch::tensor(0.3f), torch::tensor(0.4f)};
  inj.on_loss(step, loss);
  for (auto& g : opt.param_groups())
    g.options().set_lr(0.01);
  for (const auto& p : net->named_parameters(true)) {
    if (p.key().rfind("decoder.fusion.", 0) == 0) testing::set_gradient(net, p.key(), 0.0f);
  }
  inj.on_before_optimizer(step, net);
}

TEST_P(FaultScheduleTest, FiresInItsStepWindowOfItsRunOnly) {
  const TestedFault& t = GetParam();
  std::string entries = std::string("name: ") + t.name + ", at_step: 2, until_step: 3, run: 1";
  if (*t.required) entries += std::string(", ") + t.required;
  faults::FaultInjector& inj = arm_one(entries);
  const size_t leaked_before = faults::leaked_tensors().size();
  torch::Tensor w = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.01));
  inj.set_optimizer(&opt);
  std::vector<std::pair<int64_t, int64_t>> got;  // (run, step) of each event
  for (int64_t run = 0; run < 2; ++run) {
    inj.set_run(run);
    inj.on_model(testing::shared_dbnet());
    inj.on_start();
    for (int64_t step = 0; step < 6; ++step)
      run_step(inj, step, opt);
  }
  faults::leaked_tensors().resize(leaked_before);
  for (const auto& f : fired()) {
    EXPECT_EQ(f.fault, t.name);
    EXPECT_EQ(f.index, 0);
    got.emplace_back(f.run, f.step);
  }
  std::vector<std::pair<int64_t, int64_t>> want = {{1, 2}};
  if (t.repeats) want.emplace_back(1, 3);
  EXPECT_EQ(got, want) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Catalog, FaultScheduleTest, ::testing::ValuesIn(kTested),
                         [](const ::testing::TestParamInfo<TestedFault>& info) {
                           return std::string(info.param.name);
                         });

// Faults marked "from at_step on" keep firing without an until_step.
TEST_F(FaultInjectorTest, SilentFaultsFireFromAtStepOn) {
  for (const auto& spec : scenario::fault_catalog()) {
    if (!spec.from_at_step_on) continue;
    std::string required;
    for (const auto& t : kTested) {
      if (t.name == spec.name && *t.required != '\0') required = std::string(", ") + t.required;
    }
    faults::FaultInjector& inj = arm_one("name: " + spec.name + ", at_step: 3" + required);
    torch::Tensor w = torch::zeros({1}, torch::requires_grad());
    torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.01));
    inj.set_optimizer(&opt);
    const size_t before = fired().size();
    for (int64_t step : {0, 2, 3, 4, 50})
      run_step(inj, step, opt);
    std::vector<int64_t> steps;
    const auto all = fired();
    for (size_t i = before; i < all.size(); ++i)
      steps.push_back(all[i].step);
    EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 50})) << spec.name;
  }
}

// ---- Faults outside the training step.

TEST_F(FaultInjectorTest, BrokenPostprocessChangesTheValidationsFromAtStepOn) {
  const std::string real = std::string(DBH_SOURCE_DIR) + "/fixtures/real";
  faults::FaultInjector& inj =
      arm_one("name: broken_postprocess, at_step: 2, box_thresh: 0.97, run: 1",
              "data: {source: real, path: " + real + ", val: {holdout: 1}}\ntrain: {max_steps: 10, eval_every: 1}\n"
              "repeat: {in_process: 2}\n");
  model::PostprocessOptions pp;
  pp.box_thresh = 0.6;
  for (int64_t run : {0, 1}) {
    inj.set_run(run);
    for (int64_t step : {0, 1, 2, 5}) {
      model::PostprocessOptions p = pp;
      inj.on_validation(step, p);
      EXPECT_DOUBLE_EQ(p.box_thresh, run == 1 && step >= 2 ? 0.97 : 0.6) << "run " << run << " step " << step;
      EXPECT_DOUBLE_EQ(p.binarize_thresh, pp.binarize_thresh);  // not given: unchanged
    }
  }
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const auto& f : fired()) {
    got.emplace_back(f.run, f.step);
    EXPECT_DOUBLE_EQ(f.detail.at("box_thresh").get<double>(), 0.97);
  }
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {1, 5}}));
}

TEST_F(FaultInjectorTest, CorruptSampleBreaksAPrivateCopyOfARealDatasetOnly) {
  const std::filesystem::path run_dir = testing::fresh_dir("dbh-corrupt");
  testing::RemoveOnExit cleanup(run_dir);
  const std::string data = std::string(DBH_SOURCE_DIR) + "/fixtures/real";
  const std::string before = testing::read_text(std::filesystem::path(data) / "annotations.json");
  faults::FaultInjector& inj = arm_one("name: corrupt_sample, sample: 1, kind: nan_coordinate",
                               "data: {source: real, path: " + data + "}\n");
  // Synthetic data has no files: nothing to break, nothing fired.
  EXPECT_EQ(inj.on_dataset(data, scenario::DataSource::kSyntheticBoxes, run_dir.string()), data);
  EXPECT_TRUE(fired().empty());
  const std::string read = inj.on_dataset(data, scenario::DataSource::kReal, run_dir.string());
  EXPECT_EQ(read, (run_dir / "data").string());
  ASSERT_EQ(fired().size(), 1u);
  const auto f = fired().front();
  EXPECT_EQ(f.detail.at("sample"), 1);
  EXPECT_EQ(f.detail.at("copy"), read);
  EXPECT_FALSE(f.detail.at("file").get<std::string>().empty());  // sample 1's image
  // The copy's annotations hold the NaN vertex; the user's do not.
  EXPECT_NE(testing::read_text(std::filesystem::path(read) / "annotations.json"), before);
  EXPECT_EQ(testing::read_text(std::filesystem::path(data) / "annotations.json"), before) << "the user's dataset changed";
}

// ---- Input and label faults.

TEST_F(FaultInjectorTest, NanInputSetsCountPixelsOfTheSample) {
  arm_one("name: nan_input, at_step: 2, sample: 1, count: 5");
  const model::Batch in = tiny_batch(3);
  EXPECT_TRUE(same(batch_at(1, in), in));
  const model::Batch out = batch_at(2, in);
  EXPECT_EQ(count_nan(out.image[1]), 5);
  EXPECT_EQ(count_nan(out.image), 5);
  EXPECT_TRUE(torch::isnan(out.image[1].flatten().slice(0, 0, 5)).all().item<bool>());
  EXPECT_TRUE(torch::equal(out.image[1].flatten().slice(0, 5), in.image[1].flatten().slice(0, 5)));
  EXPECT_TRUE(torch::equal(out.targets.gt_thresh, in.targets.gt_thresh));
  EXPECT_TRUE(same(batch_at(3, in), in));
  const auto f = fired();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].fault, "nan_input");
  EXPECT_EQ(f[0].step, 2);
  EXPECT_EQ(f[0].detail, (json{{"tensor", "image"}, {"sample", 1}, {"sample_id", "s1"}, {"count", 5}}));
}

TEST_F(FaultInjectorTest, InfInputUsesTheCatalogDefaults) {
  arm_one("name: inf_input");  // sample 0, 16 pixels, at step 0
  const model::Batch out = batch_at(0, tiny_batch(2));
  EXPECT_EQ(torch::isposinf(out.image[0]).sum().item<int64_t>(), 16);
  EXPECT_EQ(torch::isfinite(out.image[1]).all().item<bool>(), true);
  EXPECT_EQ(count_nan(out.image), 0);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail.value("count", -1), 16);
}

TEST_F(FaultInjectorTest, NanLabelHitsTheNamedMapOnly) {
  arm_one("name: nan_label, at_step: 1, sample: 1, map: gt_shrink_mask, count: 4");
  const model::Batch in = tiny_batch(2);
  const model::Batch out = batch_at(1, in);
  EXPECT_EQ(count_nan(out.targets.gt_shrink_mask[1]), 4);
  EXPECT_EQ(count_nan(out.targets.gt_shrink_mask[0]), 0);
  for (const auto* t : {&out.image, &out.targets.gt_shrink, &out.targets.gt_thresh, &out.targets.gt_thresh_mask}) {
    EXPECT_EQ(count_nan(*t), 0);
  }
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail.value("tensor", ""), "gt_shrink_mask");

  arm_one("name: nan_label");  // gt_thresh, sample 0, 16 pixels
  const model::Batch dflt = batch_at(0, in);
  EXPECT_EQ(count_nan(dflt.targets.gt_thresh[0]), 16);
  EXPECT_EQ(count_nan(dflt.targets.gt_thresh), 16);
}

TEST_F(FaultInjectorTest, WrongNormalisationDeNormalisesToBlackWhiteOrRawPixels) {
  const model::Batch in = tiny_batch(2);
  // The image de-normalised to [0, 1] per channel, as model::kImageNet* say.
  const auto denormalised = [](const torch::Tensor& image) {
    const auto mean =
        torch::tensor({model::kImageNetMean[0], model::kImageNetMean[1], model::kImageNetMean[2]}, torch::kFloat32)
            .view({1, 3, 1, 1});
    const auto std =
        torch::tensor({model::kImageNetStd[0], model::kImageNetStd[1], model::kImageNetStd[2]}, torch::kFloat32)
            .view({1, 3, 1, 1});
    return image * std + mean;
  };
  arm_one("name: wrong_normalisation");  // black
  model::Batch out = batch_at(0, in);
  EXPECT_LT(denormalised(out.image).abs().max().item<float>(), 1e-6);
  EXPECT_TRUE(torch::equal(out.targets.gt_shrink, in.targets.gt_shrink));

  arm_one("name: wrong_normalisation, kind: saturated");
  out = batch_at(0, in);
  EXPECT_LT((denormalised(out.image) - 1).abs().max().item<float>(), 1e-6);

  arm_one("name: wrong_normalisation, kind: unnormalised");
  out = batch_at(0, in);
  EXPECT_TRUE(torch::allclose(out.image, denormalised(in.image) * 255, 1e-5, 1e-4));
  EXPECT_EQ(fired().back().detail, (json{{"kind", "unnormalised"}}));
}

// The label map `m` of every sample moved by (dx, dy), `background` where
// nothing lands.
torch::Tensor shifted(const torch::Tensor& m, int64_t dx, int64_t dy, float background) {
  auto out = torch::full_like(m, background);
  out.slice(2, dy).slice(3, dx).copy_(m.slice(2, 0, m.size(2) - dy).slice(3, 0, m.size(3) - dx));
  return out;
}

TEST_F(FaultInjectorTest, LabelShiftMovesEveryMapAgainstTheImage) {
  arm_one("name: label_shift, at_step: 1, dx: 2, dy: 1");
  const model::Batch in = tiny_batch(2);
  EXPECT_TRUE(same(batch_at(0, in), in));
  const model::Batch out = batch_at(1, in);
  EXPECT_TRUE(torch::equal(out.image, in.image));
  const auto& t = in.targets;
  EXPECT_TRUE(torch::equal(out.targets.gt_shrink, shifted(t.gt_shrink, 2, 1, 0.0f)));
  EXPECT_TRUE(torch::equal(out.targets.gt_shrink_mask, shifted(t.gt_shrink_mask, 2, 1, 1.0f)));
  EXPECT_TRUE(torch::allclose(out.targets.gt_thresh,
                              shifted(t.gt_thresh, 2, 1, static_cast<float>(model::LabelMapOptions().thresh_min))));
  EXPECT_TRUE(torch::equal(out.targets.gt_thresh_mask, shifted(t.gt_thresh_mask, 2, 1, 0.0f)));
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail, (json{{"dx", 2}, {"dy", 1}}));
}

TEST_F(FaultInjectorTest, LabelScaleGrowsOrShrinksTheMapsAboutTheCentre) {
  arm_one("name: label_scale");  // factor 2
  const model::Batch in = tiny_batch(1);
  model::Batch out = batch_at(0, in);
  // Sample 0's 2×2 kernel about the centre becomes 4×4.
  auto want = torch::zeros({1, 1, 8, 8});
  want[0][0].slice(0, 2, 6).slice(1, 2, 6).fill_(1.0);
  EXPECT_TRUE(torch::equal(out.targets.gt_shrink, want)) << out.targets.gt_shrink;
  EXPECT_TRUE(torch::equal(out.image, in.image));

  arm_one("name: label_scale, factor: 0.5");
  out = batch_at(0, in);
  // Half size: the two outer rows and columns come from outside the maps.
  auto border = torch::ones({8, 8}, torch::kBool);
  border.slice(0, 2, 6).slice(1, 2, 6).fill_(false);
  const auto& t = out.targets;
  EXPECT_TRUE((t.gt_shrink[0][0].masked_select(border) == 0).all().item<bool>());
  EXPECT_TRUE((t.gt_shrink_mask[0][0].masked_select(border) == 1).all().item<bool>());
  EXPECT_TRUE((t.gt_thresh_mask[0][0].masked_select(border) == 0).all().item<bool>());
  EXPECT_NEAR(t.gt_thresh[0][0].masked_select(border).max().item<float>(), 0.3, 1e-6);
  EXPECT_EQ(t.gt_shrink.sum().item<float>(), 1.0f);  // the kernel's centre pixel
}

TEST_F(FaultInjectorTest, LabelSwapExchangesTheLabelsOfSamplesZeroAndOne) {
  arm_one("name: label_swap");
  const model::Batch in = tiny_batch(3);
  const model::Batch out = batch_at(0, in);
  EXPECT_TRUE(torch::equal(out.image, in.image));
  const auto check = [&](const torch::Tensor& got, const torch::Tensor& was, const char* map) {
    EXPECT_TRUE(torch::equal(got[0], was[1])) << map;
    EXPECT_TRUE(torch::equal(got[1], was[0])) << map;
    EXPECT_TRUE(torch::equal(got[2], was[2])) << map;
  };
  check(out.targets.gt_shrink, in.targets.gt_shrink, "gt_shrink");
  check(out.targets.gt_shrink_mask, in.targets.gt_shrink_mask, "gt_shrink_mask");
  check(out.targets.gt_thresh, in.targets.gt_thresh, "gt_thresh");
  check(out.targets.gt_thresh_mask, in.targets.gt_thresh_mask, "gt_thresh_mask");
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail, (json{{"samples", {"s0", "s1"}}}));
}

TEST_F(FaultInjectorTest, AllDontCareMasksEveryWord) {
  arm_one("name: all_dont_care");
  const model::Batch in = tiny_batch(3);
  const model::Batch out = batch_at(0, in);
  const auto& t = out.targets;
  EXPECT_EQ(t.gt_shrink.sum().item<float>(), 0.0f);
  EXPECT_EQ(t.gt_thresh_mask.sum().item<float>(), 0.0f);
  EXPECT_NEAR(t.gt_thresh.max().item<float>(), 0.3, 1e-6);
  EXPECT_NEAR(t.gt_thresh.min().item<float>(), 0.3, 1e-6);
  // Trained on nowhere near text; the earlier don't-care pixel stays one.
  EXPECT_TRUE(
      torch::equal(t.gt_shrink_mask, (in.targets.gt_thresh_mask == 0).to(torch::kFloat32) * in.targets.gt_shrink_mask));
  EXPECT_TRUE(torch::equal(out.image, in.image));
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail, (json{{"text_pixels", 3 * 16}}));
}

TEST_F(FaultInjectorTest, NondeterminismShiftsOneMicroBatchByAPerProcessAmount) {
  faults::FaultInjector& inj = arm_one("name: nondeterminism, until_step: 1, micro_batch: 1, scale: 0.01");
  const model::Batch in = tiny_batch(2);
  std::vector<double> added;
  for (int64_t step : {0, 1}) {
    inj.on_step_begin(step);
    model::Batch first = clone(in), second = clone(in);
    inj.on_batch(step, first);
    inj.on_batch(step, second);
    EXPECT_TRUE(same(first, in)) << "micro-batch 0 of step " << step;
    const auto diff = second.image - in.image;
    // One amount added to every pixel, in [0.1, 1] × scale.
    EXPECT_LT((diff - diff.mean()).abs().max().item<float>(), 1e-5);
    added.push_back(diff.mean().item<double>());
    EXPECT_GE(added.back(), 0.001 - 1e-6);
    EXPECT_LE(added.back(), 0.01 + 1e-6);
    EXPECT_TRUE(torch::equal(second.targets.gt_shrink, in.targets.gt_shrink));
  }
  EXPECT_NEAR(added[0], added[1], 1e-6);  // the same in every step of one process
  const auto f = fired();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].detail.value("micro_batch", -1), 1);
  EXPECT_NEAR(f[0].detail.value("added", 0.0), added[0], 1e-6);
}

// ---- Module outputs, losses, gradients and the optimizer.

// What module `module` hands on at `step` when its output is all ones.
torch::Tensor module_output(faults::FaultInjector& inj, int64_t step, const char* module) {
  inj.on_step_begin(step);
  inj.on_enter(module);
  torch::Tensor out = torch::ones({2, 4, 8, 8});
  inj.on_output(module, out);
  return out;
}

TEST_F(FaultInjectorTest, NanActivationReplacesTheNamedModulesOutput) {
  faults::FaultInjector& inj = arm_one("name: nan_activation, module: decoder.fusion, at_step: 1");
  const auto forward = [&](int64_t step, const char* module) { return module_output(inj, step, module); };
  EXPECT_EQ(count_nan(forward(0, "decoder.fusion")), 0);
  EXPECT_EQ(count_nan(forward(1, "decoder.smooth2")), 0);
  const auto out = forward(1, "decoder.fusion");
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_EQ(count_nan(out), out.numel());
  EXPECT_EQ(count_nan(forward(2, "decoder.fusion")), 0);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].module, "decoder.fusion");
  EXPECT_EQ(fired()[0].step, 1);
}

TEST_F(FaultInjectorTest, PerturbActivationScalesTheNamedModulesOutputFromItsStepOn) {
  faults::FaultInjector& inj =
      arm_one("name: perturb_activation, module: decoder.fusion, at_step: 2, until_step: 100, relative: 0.01");
  const auto forward = [&](int64_t step, const char* module) { return module_output(inj, step, module); };
  EXPECT_TRUE(torch::equal(forward(1, "decoder.fusion"), torch::ones({2, 4, 8, 8})));
  EXPECT_TRUE(torch::equal(forward(2, "decoder.smooth2"), torch::ones({2, 4, 8, 8})));
  for (int64_t step : {2, 3, 9}) {
    EXPECT_TRUE(torch::allclose(forward(step, "decoder.fusion"), torch::full({2, 4, 8, 8}, 1.01f))) << step;
  }
  ASSERT_EQ(fired().size(), 3u);
  EXPECT_EQ(fired()[0].step, 2);
}

TEST_F(FaultInjectorTest, LossScaleOverflowScalesTheTotalOnly) {
  faults::FaultInjector& inj = arm_one("name: loss_scale_overflow, at_step: 1");  // factor 1e39
  const auto loss_at = [&](int64_t step) {
    inj.on_step_begin(step);
    model::DbLossParts loss{torch::tensor(0.5f), torch::tensor(0.2f), torch::tensor(0.03f), torch::tensor(0.4f)};
    inj.on_loss(step, loss);
    return loss;
  };
  EXPECT_EQ(loss_at(0).total.item<float>(), 0.5f);
  const auto hit = loss_at(1);
  EXPECT_TRUE(std::isinf(hit.total.item<float>()) && hit.total.item<float>() > 0) << hit.total.item<float>();
  EXPECT_EQ(hit.bce.item<float>(), 0.2f);
  EXPECT_EQ(hit.l1.item<float>(), 0.03f);
  EXPECT_EQ(hit.dice.item<float>(), 0.4f);
  EXPECT_EQ(loss_at(2).total.item<float>(), 0.5f);

  faults::FaultInjector& small = arm_one("name: loss_scale_overflow, factor: 8");
  small.on_step_begin(0);
  model::DbLossParts loss{torch::tensor(0.5f), torch::tensor(0.2f), torch::tensor(0.03f), torch::tensor(0.4f)};
  small.on_loss(0, loss);
  EXPECT_EQ(loss.total.item<float>(), 4.0f);
  EXPECT_DOUBLE_EQ(fired().back().detail.value("factor", 0.0), 8.0);
}

// The optimizer's learning rate after on_before_optimizer at `step`, the
// trainer having set the scheduled `lr` first.
double lr_after(faults::FaultInjector& inj, torch::optim::Optimizer& opt, int64_t step, double lr) {
  inj.on_step_begin(step);
  for (auto& g : opt.param_groups())
    g.options().set_lr(lr);
  inj.on_before_optimizer(step, testing::shared_dbnet());
  return opt.param_groups().front().options().get_lr();
}

TEST_F(FaultInjectorTest, LrSpikeMultipliesTheScheduledRate) {
  faults::FaultInjector& inj = arm_one("name: lr_spike, at_step: 2");  // factor 10000
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.01));
  inj.set_optimizer(&opt);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 1, 0.01), 0.01);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 2, 0.008), 80.0);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 3, 0.006), 0.006);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_DOUBLE_EQ(fired()[0].detail.value("lr", 0.0), 80.0);
}

TEST_F(FaultInjectorTest, LrFreezeZeroesTheRateFromAtStepOn) {
  faults::FaultInjector& inj = arm_one("name: lr_freeze, at_step: 2");
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  torch::optim::Adam opt({w}, torch::optim::AdamOptions(0.001));
  inj.set_optimizer(&opt);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 1, 0.001), 0.001);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 2, 0.0009), 0.0);
  EXPECT_DOUBLE_EQ(lr_after(inj, opt, 7, 0.0004), 0.0);
  ASSERT_EQ(fired().size(), 2u);
  EXPECT_DOUBLE_EQ(fired()[0].detail.value("scheduled_lr", 0.0), 0.0009);
}

// Parameters of `net` whose gradient holds a NaN.
std::vector<std::string> nan_gradients(model::DbNet& net) {
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters(true)) {
    if (p.value().grad().defined() && torch::isnan(p.value().grad()).any().item<bool>()) names.push_back(p.key());
  }
  return names;
}

// Sets back to 0 every gradient an injected nan_gradient filled (whole
// gradients, so their first element tells), without a pass over the others.
void repair_gradients(model::DbNet& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) {
    auto& g = p.mutable_grad();
    if (g.defined() && std::isnan(g.flatten()[0].item<float>())) g.fill_(0.0f);
  }
}

TEST_F(FaultInjectorTest, NanGradientFillsAModulesOrOneParametersGradients) {
  auto& net = testing::shared_dbnet();
  std::vector<std::string> fusion;
  for (const auto& p : net->named_parameters(true)) {
    if (p.key().rfind("decoder.fusion.", 0) == 0) fusion.push_back(p.key());
  }
  ASSERT_FALSE(fusion.empty());
  testing::fill_gradients(net, 0.0f);
  faults::FaultInjector& inj = arm_one("name: nan_gradient, module: decoder.fusion, at_step: 1");
  inj.on_step_begin(0);
  inj.on_before_optimizer(0, net);
  EXPECT_TRUE(nan_gradients(net).empty());
  inj.on_step_begin(1);
  inj.on_before_optimizer(1, net);
  EXPECT_EQ(nan_gradients(net), fusion);
  for (const auto& name : fusion) {
    EXPECT_EQ(count_nan(net->named_parameters(true)[name].grad()), net->named_parameters(true)[name].numel()) << name;
  }
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].module, "decoder.fusion");
  EXPECT_EQ(fired()[0].detail.value("parameters", -1), static_cast<int64_t>(fusion.size()));

  repair_gradients(net);
  ASSERT_TRUE(nan_gradients(net).empty());
  faults::FaultInjector& one = arm_one("name: nan_gradient, parameter: head.prob.up2.weight");
  one.on_step_begin(0);
  one.on_before_optimizer(0, net);
  EXPECT_EQ(nan_gradients(net), (std::vector<std::string>{"head.prob.up2.weight"}));
  EXPECT_EQ(fired().back().detail.value("parameters", -1), 1);
}

// The module a nan_gradient fault names (any the scenario loader accepts) is
// the module the monitors attribute the NaN gradients to. Expects the shared
// net's gradients defined and finite (fill_gradients), and leaves them so.
void expect_nan_gradient_attributed_to(const std::string& module) {
  auto& net = testing::shared_dbnet();
  testing::EventCapture events;
  const auto faults = load_faults("  - {name: nan_gradient, module: " + module + "}\n");
  faults::FaultInjector inj(faults, events.writer(), "cpu");
  monitors::Monitors monitors(monitors::Monitors::Mode::kLocalise, events.writer(), 0);
  inj.on_step_begin(0);
  monitors.on_step_begin(0);
  inj.on_before_optimizer(0, net);
  EXPECT_THROW(monitors.on_before_optimizer(0, net), monitors::DivergedError) << module;
  repair_gradients(net);
  const auto fired = events.all(proto::fault_fired_from);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_GT(fired[0].detail.value("parameters", -1), 0) << module << ": the fault hit no parameter";
  const auto health = events.all(proto::health_from);
  ASSERT_EQ(health.size(), 1u) << module;
  EXPECT_EQ(health[0].module.value_or(""), module) << health[0].site;
}

TEST_F(FaultInjectorTest, NanGradientHitsTheModuleTheMonitorsName) {
  testing::fill_gradients(testing::shared_dbnet(), 0.0f);
  for (const auto& module : model::observed_modules_with_parameters(model::DecoderKind::kFpn)) {
    expect_nan_gradient_attributed_to(module);
  }
}

// The stem's parameters are encoder.conv1.* and encoder.bn1.*: a module name is
// matched through model::observed_module_of, as the monitors attribute
// gradients, never as a parameter-name prefix (which matched none of them).
TEST_F(FaultInjectorTest, NanGradientOnTheEncoderStemHitsItsParameters) {
  testing::fill_gradients(testing::shared_dbnet(), 0.0f);
  expect_nan_gradient_attributed_to("encoder.stem");
}

TEST_F(FaultInjectorTest, UnstableBinarizationSwitchesTheHead) {
  auto& net = testing::shared_dbnet();
  faults::FaultInjector& inj = arm_one("name: unstable_binarization");  // at step 0, float16
  inj.on_model(net);
  EXPECT_EQ(net->head->options.binarization(), model::Binarization::kExp);
  EXPECT_EQ(net->head->options.binarization_dtype(), torch::kFloat16);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].module, "head.binarize");
  EXPECT_EQ(fired()[0].step, 0);

  net->set_binarization(model::Binarization::kSigmoid, torch::kFloat32);
  faults::FaultInjector& later = arm_one("name: unstable_binarization, at_step: 3, dtype: float32");
  later.on_model(net);
  for (int64_t step = 0; step < 3; ++step)
    later.on_step_begin(step);
  EXPECT_EQ(net->head->options.binarization(), model::Binarization::kSigmoid);
  later.on_step_begin(3);
  EXPECT_EQ(net->head->options.binarization(), model::Binarization::kExp);
  EXPECT_EQ(net->head->options.binarization_dtype(), torch::kFloat32);
  EXPECT_EQ(fired().back().step, 3);
}

// ---- Errors and memory.

TEST_F(FaultInjectorTest, CudaErrorOnTheCpuRaisesTheErrorsText) {
  for (const auto& p : scenario::find_fault("cuda_error")->params) {
    if (p.name != "kind") continue;
    for (size_t k = 0; k < p.allowed.size(); ++k) {
      const std::string& kind = p.allowed[k];
      const auto value = static_cast<scenario::CudaErrorKind>(k);
      EXPECT_EQ(scenario::choice_name(value), kind);
      faults::FaultInjector& inj = arm_one("name: cuda_error, at_step: 1, kind: " + kind);  // in decoder.fusion
      inj.on_step_begin(0);
      EXPECT_NO_THROW(inj.on_enter("decoder.fusion"));
      inj.on_step_begin(1);
      EXPECT_NO_THROW(inj.on_enter("decoder.smooth2"));
      try {
        inj.on_enter("decoder.fusion");
        ADD_FAILURE() << kind << ": no error";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), faults::FaultInjector::cuda_error_text(value));
      }
      // Not sticky: the next module, and the teardown, work.
      EXPECT_NO_THROW(inj.on_enter("head.prob.conv")) << kind;
      EXPECT_FALSE(inj.context_poisoned());
      EXPECT_NO_THROW(inj.on_teardown());
      ASSERT_FALSE(fired().empty());
      EXPECT_EQ(fired().back().module, "decoder.fusion");
      EXPECT_EQ(fired().back().detail, (json{{"kind", kind}, {"sticky", false}, {"real", false}}));
      // Each kind has its own text, which the knowledge base classifies.
      EXPECT_EQ(faults::FaultInjector::cuda_error_text(value).find("unknown error"), std::string::npos) << kind;
      EXPECT_NE(kb::KnowledgeBase::shipped().match_message(faults::FaultInjector::cuda_error_text(value)), nullptr) << kind;
    }
  }
}

TEST_F(FaultInjectorTest, StickyCudaErrorPoisonsEveryLaterModuleAndTheTeardown) {
  faults::FaultInjector& inj = arm_one("name: cuda_error, kind: illegal_memory_access, module: encoder.layer2, sticky: true");
  inj.on_step_begin(0);
  EXPECT_THROW(inj.on_enter("encoder.layer2"), std::runtime_error);
  EXPECT_TRUE(inj.context_poisoned());
  try {
    inj.on_enter("encoder.layer3");
    ADD_FAILURE() << "a poisoned context ran a module";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
  }
  EXPECT_THROW(inj.on_teardown(), std::runtime_error);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].detail.value("sticky", false), true);
}

TEST_F(FaultInjectorTest, LeakRetainsItsBytesInEveryRun) {
  faults::FaultInjector& inj = arm_one("name: leak, at_step: 1, bytes: 1MiB");
  const size_t before = faults::leaked_tensors().size();
  for (int64_t run = 0; run < 2; ++run) {
    inj.set_run(run);
    for (int64_t step = 0; step < 3; ++step)
      inj.on_step_begin(step);
    ASSERT_EQ(faults::leaked_tensors().size(), before + static_cast<size_t>(run) + 1) << "run " << run;
    EXPECT_EQ(faults::leaked_tensors().back().nbytes(), 1u << 20);
  }
  faults::leaked_tensors().resize(before);
  const auto f = fired();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].run, 1);
  EXPECT_EQ(f[1].step, 1);
  EXPECT_EQ(f[1].detail.value("bytes", -1), 1 << 20);
}

// Bytes malloc has handed out and not taken back, in its heaps and in mmapped
// blocks. Not the RSS: a block can reuse heap pages that earlier tests freed
// and that are still resident, and then the RSS does not move.
int64_t malloc_held_bytes() {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

TEST_F(FaultInjectorTest, MemoryBallastHoldsHostMemoryFromTheStart) {
  constexpr int64_t kBytes = int64_t{16} << 20;
  faults::FaultInjector& inj = arm_one("name: memory_ballast, bytes: 16MiB, on: host");
  const int64_t held = malloc_held_bytes();
  inj.on_model(testing::shared_dbnet());
  inj.on_start();
  EXPECT_GE(malloc_held_bytes() - held, kBytes);
  ASSERT_EQ(fired().size(), 1u);
  EXPECT_EQ(fired()[0].step, 0);
  EXPECT_EQ(fired()[0].detail, (json{{"bytes", kBytes}, {"on", "host"}}));
  inj.on_step_begin(0);
  EXPECT_EQ(fired().size(), 1u);  // once

  faults::FaultInjector& later = arm_one("name: memory_ballast, bytes: 4KiB, at_step: 2");  // on the device: the CPU
  later.on_start();
  later.on_step_begin(1);
  EXPECT_EQ(fired().size(), 1u);
  later.on_step_begin(2);
  ASSERT_EQ(fired().size(), 2u);
  EXPECT_EQ(fired().back().detail.value("bytes", -1), 4096);
}

}  // namespace
}  // namespace dbh::harness
