#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "model/train/fused_sgd.h"
#include "model/train/trainer.h"
#include "tests/support/files.h"

namespace dbh::model {
namespace {

DbNet small_net(uint64_t seed) {
  torch::manual_seed(seed);
  return DbNet(DbNetOptions().encoder(ResNetOptions().depth(18)));
}

TrainOptions cpu_options(int64_t steps) {
  return TrainOptions()
      .max_steps(steps)
      .device("cpu")
      .determinism(DeterminismOptions().seed(7).threads(2));
}

TEST(TrainerTest, OverfitsOneSmallBatch) {
  apply_determinism(DeterminismOptions().seed(3).threads(2));
  const Batch batch = synthetic_boxes_batch(2, 64, 64, 11);
  Trainer trainer(small_net(3), cpu_options(40).optimizer(OptimizerKind::kAdam).lr(1e-3));
  const auto results = trainer.fit([&](int64_t) { return batch; });
  ASSERT_EQ(results.size(), 40u);
  for (const auto& r : results) ASSERT_TRUE(std::isfinite(r.loss)) << "step " << r.step;
  const double first = results.front().loss;
  const double last = results.back().loss;
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(TrainerTest, CheckpointResumeIsBitIdentical) {
  for (auto kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    const auto source = [](int64_t micro) {
      return synthetic_boxes_batch(2, 64, 64, 100 + static_cast<uint64_t>(micro));
    };
    const auto opts = cpu_options(6).optimizer(kind).lr(kind == OptimizerKind::kSgd ? 0.01 : 1e-3);
    apply_determinism(opts.determinism());
    Trainer straight(small_net(5), opts);
    const auto full = straight.fit(source);

    apply_determinism(opts.determinism());
    Trainer first_half(small_net(5), opts);
    for (int i = 0; i < 3; ++i) first_half.step(source);
    // 100–150 MB a checkpoint: removed when the test ends, pass or fail.
    const dbh::testing::ScratchDir dir("dbh-resume");
    const auto path = (dir / ("resume-" + to_string(kind) + ".pt")).string();
    first_half.save_checkpoint(path);
    // Perturb the global RNG: the checkpoint must restore it.
    torch::rand({100});

    Trainer resumed(small_net(99), opts);  // different initial weights
    resumed.load_checkpoint(path);
    ASSERT_EQ(resumed.next_step(), 3);
    for (int64_t s = 3; s < 6; ++s) {
      const auto r = resumed.step(source);
      EXPECT_EQ(r.loss_bits, full[static_cast<size_t>(s)].loss_bits)
          << to_string(kind) << " step " << s << ": " << r.loss << " vs "
          << full[static_cast<size_t>(s)].loss;
    }
    const auto a = straight.model()->parameters();
    const auto b = resumed.model()->parameters();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(torch::equal(a[i], b[i])) << i;
  }
}

TEST(TrainerTest, PolyLearningRate) {
  Trainer trainer(small_net(1), cpu_options(100).lr(0.01).poly_power(0.9));
  EXPECT_DOUBLE_EQ(trainer.lr_at(0), 0.01);
  EXPECT_NEAR(trainer.lr_at(50), 0.01 * std::pow(0.5, 0.9), 1e-12);
  EXPECT_DOUBLE_EQ(trainer.lr_at(100), 0.0);
}

TEST(TrainerTest, AccumulationConsumesMicroBatchesInOrder) {
  std::vector<int64_t> seen;
  Trainer trainer(small_net(1), cpu_options(2).accumulation(3));
  trainer.fit([&](int64_t micro) {
    seen.push_back(micro);
    return synthetic_random_batch(1, 64, 64, static_cast<uint64_t>(micro));
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(TrainerTest, GradientClippingBoundsTheNorm) {
  Trainer trainer(small_net(1), cpu_options(1).grad_clip(0.01));
  const auto r = trainer.step([](int64_t) { return synthetic_random_batch(2, 32, 32, 1); });
  EXPECT_GT(r.grad_norm, 0.01);  // before clipping
  double sq = 0;
  for (const auto& p : trainer.model()->parameters()) {
    if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
  }
  EXPECT_LE(std::sqrt(sq), 0.01 * 1.001);
}

TEST(TrainerTest, MixedPrecisionOnCpuIsRejected) {
  EXPECT_THROW(Trainer(small_net(1), cpu_options(1).precision(Precision::kFp16)), c10::Error);
}

TEST(TrainerTest, ListenersSeeEveryStage) {
  struct Recorder : TrainerListener {
    std::vector<std::string> calls;
    void on_step_begin(int64_t) override { calls.push_back("begin"); }
    void on_batch(int64_t, Batch&) override { calls.push_back("batch"); }
    void on_forward(int64_t, DbNetOutput&) override { calls.push_back("forward"); }
    void on_loss(int64_t, DbLossParts&) override { calls.push_back("loss"); }
    void on_before_optimizer(int64_t, DbNet&) override { calls.push_back("optimizer"); }
    void on_step_end(int64_t, const StepResult&) override { calls.push_back("end"); }
  };
  Recorder rec;
  Trainer trainer(small_net(1), cpu_options(1));
  trainer.add_listener(rec);
  trainer.step([](int64_t) { return synthetic_random_batch(1, 64, 64, 1); });
  EXPECT_EQ(rec.calls, (std::vector<std::string>{"begin", "batch", "forward", "loss",
                                                  "optimizer", "end"}));
}

// Note [One pass of SGD]: parameters of the kinds a DbNet has (a conv
// weight channels-last and in NCHW, a bias), with gradients that change
// every step.
struct SgdCase {
  std::vector<torch::Tensor> params, grads;
};
SgdCase sgd_case(bool channels_last) {
  torch::manual_seed(5);
  SgdCase c;
  auto conv = torch::randn({64, 32, 3, 3});
  if (channels_last) conv = conv.contiguous(torch::MemoryFormat::ChannelsLast);
  for (auto t : {conv, torch::randn({64, 32, 3, 3}), torch::randn({100003})}) {
    c.params.push_back(t.clone().set_requires_grad(true));
  }
  for (int k = 0; k < 4; ++k) {
    for (const auto& p : c.params) c.grads.push_back(torch::randn_like(p, torch::MemoryFormat::Preserve));
  }
  return c;
}
// Runs four steps of `opt` over `c.params` (cloned), gradient k of each
// parameter in step k; returns the parameters.
template <typename Opt>
std::vector<torch::Tensor> sgd_steps(const SgdCase& c, torch::optim::SGDOptions o) {
  std::vector<torch::Tensor> params;
  for (const auto& p : c.params) params.push_back(p.detach().clone().set_requires_grad(true));
  Opt opt(params, o);
  for (size_t k = 0; k < 4; ++k) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = c.grads[k * params.size() + i].clone();
    opt.step();
  }
  return params;
}
torch::optim::SGDOptions dbnet_sgd() { return torch::optim::SGDOptions(0.007).momentum(0.9).weight_decay(1e-4); }

TEST(FusedSgdTest, ComputesSgdsUpdateRoundingEachOperationOnce) {
  for (const bool cl : {false, true}) {
    const SgdCase c = sgd_case(cl);
    const auto fused = sgd_steps<FusedSGD>(c, dbnet_sgd());
    // The update written out with one rounding per operation.
    const float wd = 1e-4f, m = 0.9f, neg_lr = -0.007f;
    for (size_t i = 0; i < c.params.size(); ++i) {
      auto p = c.params[i].detach().clone();
      torch::Tensor buf;
      for (size_t k = 0; k < 4; ++k) {
        const auto d = c.grads[k * c.params.size() + i] + p * wd;
        buf = k == 0 ? d : buf * m + d;
        p = p + buf * neg_lr;
      }
      EXPECT_TRUE(torch::equal(fused[i], p)) << "parameter " << i << (cl ? " (channels-last)" : "");
      EXPECT_EQ(fused[i].strides(), c.params[i].strides()) << "parameter " << i;
    }
    // And LibTorch's SGD, to its last bits (it fuses multiply-adds).
    const auto libtorch = sgd_steps<torch::optim::SGD>(c, dbnet_sgd());
    for (size_t i = 0; i < c.params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(fused[i], libtorch[i], /*rtol=*/1e-6, /*atol=*/1e-7)) << "parameter " << i;
    }
  }
}

TEST(FusedSgdTest, TheResultDoesNotDependOnTheThreadCount) {
  const SgdCase c = sgd_case(true);
  torch::set_num_threads(1);
  const auto one = sgd_steps<FusedSGD>(c, dbnet_sgd());
  torch::set_num_threads(2);
  const auto two = sgd_steps<FusedSGD>(c, dbnet_sgd());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << "parameter " << i;
}

// Without momentum or weight decay the update is p + (−lr)·g; where the
// loop cannot run (a gradient of other strides than its parameter, Nesterov
// momentum) the step is LibTorch's own.
TEST(FusedSgdTest, OtherSettingsAndLayoutsTakeLibTorchsStep) {
  const SgdCase c = sgd_case(false);
  const auto no_momentum = sgd_steps<FusedSGD>(c, torch::optim::SGDOptions(0.01));
  for (size_t i = 0; i < c.params.size(); ++i) {
    auto p = c.params[i].detach().clone();
    for (size_t k = 0; k < 4; ++k) p = p + c.grads[k * c.params.size() + i] * -0.01f;
    EXPECT_TRUE(torch::equal(no_momentum[i], p)) << i;
  }

  const auto nesterov = dbnet_sgd().nesterov(true);
  const auto fused_nesterov = sgd_steps<FusedSGD>(c, nesterov);
  const auto libtorch_nesterov = sgd_steps<torch::optim::SGD>(c, nesterov);
  for (size_t i = 0; i < c.params.size(); ++i) EXPECT_TRUE(torch::equal(fused_nesterov[i], libtorch_nesterov[i])) << i;

  SgdCase transposed = sgd_case(false);  // NCHW parameters, channels-last gradients
  for (auto& g : transposed.grads) {
    if (g.dim() == 4) g = g.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  const auto fused_t = sgd_steps<FusedSGD>(transposed, dbnet_sgd());
  const auto libtorch_t = sgd_steps<torch::optim::SGD>(transposed, dbnet_sgd());
  for (size_t i = 0; i < c.params.size(); ++i) EXPECT_TRUE(torch::equal(fused_t[i], libtorch_t[i])) << i;
}

// The momentum buffers are SGD's state: an archive of one loads in the other
// and the next step continues from the same buffers.
TEST(FusedSgdTest, ItsStateIsSgdsState) {
  const SgdCase c = sgd_case(true);
  std::vector<torch::Tensor> a, b;
  for (const auto& p : c.params) {
    a.push_back(p.detach().clone().set_requires_grad(true));
    b.push_back(p.detach().clone().set_requires_grad(true));
  }
  FusedSGD fused(a, dbnet_sgd());
  for (size_t i = 0; i < a.size(); ++i) a[i].mutable_grad() = c.grads[i].clone();
  fused.step();
  torch::serialize::OutputArchive out;
  fused.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::optim::SGD sgd(b, dbnet_sgd());
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  sgd.load(in);
  ASSERT_EQ(sgd.state().size(), a.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const auto& buf = static_cast<torch::optim::SGDParamState&>(*sgd.state().at(b[i].unsafeGetTensorImpl()));
    EXPECT_TRUE(torch::equal(buf.momentum_buffer(), c.grads[i] + c.params[i].detach() * 1e-4f)) << i;
  }
}

TEST(GradScalerTest, BacksOffOnOverflowAndGrowsAfterInterval) {
  GradScaler scaler(true, 1024.0, /*growth_interval=*/2, torch::kCPU);
  auto p = torch::zeros({3}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({1024.0f, std::numeric_limits<float>::infinity(), 0.0f});
  EXPECT_FALSE(scaler.unscale({p}));
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 512.0);
  for (int i = 0; i < 2; ++i) {
    p.mutable_grad() = torch::tensor({512.0f, 0.0f, 0.0f});
    EXPECT_TRUE(scaler.unscale({p}));
    EXPECT_FLOAT_EQ(p.grad()[0].item<float>(), 1.0f);
    scaler.update();
  }
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 1024.0);
}

TEST(DeviceTest, ParsesAndRejects) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_THROW(parse_device("gpu7"), std::invalid_argument);
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(parse_device("cuda:0"), std::runtime_error);
  }
}

class CudaTrainerTest : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  }
};

TEST_P(CudaTrainerTest, TrainsFiniteStepsOnCuda) {
  auto opts = cpu_options(3).device("cuda:0").precision(GetParam());
  Trainer trainer(small_net(1), opts);
  const auto results = trainer.fit([](int64_t m) {
    return synthetic_boxes_batch(2, 128, 128, static_cast<uint64_t>(m));
  });
  for (const auto& r : results) EXPECT_TRUE(std::isfinite(r.loss)) << r.step;
  // The head's last layer and the loss stay float32 under autocast.
  auto out = trainer.model()->forward(torch::randn({1, 3, 64, 64}, torch::kCUDA));
  EXPECT_EQ(out.prob_logits.scalar_type(), torch::kFloat32);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaTrainerTest,
                         ::testing::Values(Precision::kFp32, Precision::kFp16, Precision::kBf16),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace dbh::model
