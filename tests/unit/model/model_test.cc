#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "model/dbnet.h"
#include "model/nn/hooks.h"
#include "model/observed_modules.h"
#include "tests/support/files.h"

namespace dbh::model {
namespace {

struct ShapeCase {
  int64_t depth;
  DecoderKind decoder;
  int64_t height;
  int64_t width;
};

class DbNetShapeTest : public ::testing::TestWithParam<ShapeCase> {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    torch::set_num_threads(2);
  }
};

TEST_P(DbNetShapeTest, OutputsHaveInputResolution) {
  const auto c = GetParam();
  DbNet net(DbNetOptions().encoder(ResNetOptions().depth(c.depth)).decoder(c.decoder));
  net->train();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, c.height, c.width});
  const auto out = net->forward(x);
  for (const auto& t : {out.prob_logits, out.probability, out.threshold, out.binary}) {
    ASSERT_TRUE(t.defined());
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 1, c.height, c.width}));
    EXPECT_EQ(t.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::isfinite(t).all().item<bool>());
  }
  EXPECT_GE(out.probability.min().item<float>(), 0.0f);
  EXPECT_LE(out.probability.max().item<float>(), 1.0f);
  // Evaluation mode returns P only.
  net->eval();
  const auto eval_out = net->forward(x);
  EXPECT_TRUE(eval_out.probability.defined());
  EXPECT_FALSE(eval_out.threshold.defined());
}

std::string shape_case_name(const ::testing::TestParamInfo<ShapeCase>& info) {
  const auto& c = info.param;
  return "R" + std::to_string(c.depth) + "_" + to_string(c.decoder) + "_" +
         std::to_string(c.height) + "x" + std::to_string(c.width);
}

INSTANTIATE_TEST_SUITE_P(
    EncoderDecoderSizes, DbNetShapeTest,
    ::testing::Values(ShapeCase{18, DecoderKind::kFpn, 64, 64},
                      ShapeCase{18, DecoderKind::kFpn, 96, 160},
                      ShapeCase{18, DecoderKind::kPan, 64, 64},
                      ShapeCase{18, DecoderKind::kPan, 128, 96},
                      ShapeCase{34, DecoderKind::kFpn, 64, 96},
                      ShapeCase{34, DecoderKind::kPan, 96, 64},
                      ShapeCase{50, DecoderKind::kFpn, 64, 64},
                      ShapeCase{50, DecoderKind::kPan, 96, 128}),
    shape_case_name);

TEST(ResNetTest, ExportsC2ToC5WithDocumentedChannels) {
  torch::NoGradGuard no_grad;
  for (const auto& [depth, channels] :
       std::vector<std::pair<int64_t, std::array<int64_t, 4>>>{
           {18, {64, 128, 256, 512}}, {34, {64, 128, 256, 512}}, {50, {256, 512, 1024, 2048}}}) {
    ResNet net(ResNetOptions().depth(depth));
    EXPECT_EQ(net->out_channels(), channels) << "depth " << depth;
    const auto f = net->forward(torch::randn({1, 3, 64, 96}));
    EXPECT_EQ(f.c2.sizes(), (std::vector<int64_t>{1, channels[0], 16, 24}));
    EXPECT_EQ(f.c3.sizes(), (std::vector<int64_t>{1, channels[1], 8, 12}));
    EXPECT_EQ(f.c4.sizes(), (std::vector<int64_t>{1, channels[2], 4, 6}));
    EXPECT_EQ(f.c5.sizes(), (std::vector<int64_t>{1, channels[3], 2, 3}));
  }
}

TEST(ResNetTest, RejectsSizesNotDivisibleBy32) {
  ResNet net(ResNetOptions().depth(18));
  try {
    net->forward(torch::randn({1, 3, 100, 64}));
    FAIL() << "expected an error for 100x64";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by 32, but got 100x64"), std::string::npos)
        << e.what();
  }
}

TEST(ResNetTest, RejectsUnknownDepth) {
  EXPECT_THROW(ResNet(ResNetOptions().depth(101)), c10::Error);
}

TEST(DbNetTest, ModuleNamesAreStable) {
  for (auto decoder : {DecoderKind::kFpn, DecoderKind::kPan}) {
    DbNet net(DbNetOptions().decoder(decoder));
    const auto names = net->module_names();
    const std::set<std::string> have(names.begin(), names.end());
    for (const char* expected :
         {"encoder", "encoder.conv1", "encoder.layer1", "encoder.layer2", "encoder.layer3",
          "encoder.layer4", "encoder.layer3.0.downsample", "decoder", "decoder.lateral2",
          "decoder.lateral5", "decoder.fusion", "head", "head.prob", "head.prob.conv",
          "head.prob.up2", "head.thresh", "head.thresh.up2"}) {
      EXPECT_TRUE(have.count(expected)) << to_string(decoder) << " lacks " << expected;
    }
    // Registration order is execution order: encoder, then decoder, then head.
    const auto pos = [&](const std::string& n) {
      return std::find(names.begin(), names.end(), n) - names.begin();
    };
    EXPECT_LT(pos("encoder.layer4"), pos("decoder.fusion"));
    EXPECT_LT(pos("decoder.fusion"), pos("head.prob"));
  }
}

// The modules scenarios may name (model/observed_modules.h) are the ones a
// training forward pass reports, in the order it runs them, and the ones
// said to own parameters are those whose parameters observed_module_of maps
// to.
TEST(DbNetTest, AForwardPassReportsTheDeclaredObservedModules) {
  struct Recorder : ModuleObserver {
    std::vector<std::string> entered;
    void on_enter(const std::string& name) override { entered.push_back(name); }
  };
  torch::manual_seed(0);
  for (auto decoder : {DecoderKind::kFpn, DecoderKind::kPan}) {
    SCOPED_TRACE(to_string(decoder));
    DbNet net(DbNetOptions().decoder(decoder));
    net->train();
    Recorder recorder;
    set_module_observer(&recorder);
    {
      torch::NoGradGuard no_grad;
      (void)net->forward(torch::rand({1, 3, 64, 64}));
    }
    set_module_observer(nullptr);
    EXPECT_EQ(recorder.entered, observed_modules(decoder));
    std::set<std::string> owners;
    for (const auto& p : net->named_parameters()) owners.insert(observed_module_of(p.key()));
    const auto& declared = observed_modules_with_parameters(decoder);
    EXPECT_EQ(owners, std::set<std::string>(declared.begin(), declared.end()));
    // Every parameter the model has is a name a scenario may give.
    for (const auto& p : net->named_parameters()) EXPECT_TRUE(is_parameter_name(decoder, p.key())) << p.key();
  }
  for (const char* wrong : {"head.prob.bn", "head.prob.bogus.weight", "decoder.fusion", "weight", "head.binarize.k"}) {
    EXPECT_FALSE(is_parameter_name(DecoderKind::kFpn, wrong)) << wrong;
  }
}

TEST(DbNetTest, HeadAndDecoderFollowDbInitialisation) {
  DbNet net;
  for (const auto& item : net->named_modules()) {
    if (item.key().rfind("head", 0) != 0) continue;
    if (auto* bn = item.value()->as<torch::nn::BatchNorm2d>()) {
      EXPECT_TRUE(torch::allclose(bn->bias, torch::full_like(bn->bias, 1e-4))) << item.key();
      EXPECT_TRUE(torch::all(bn->weight == 1).item<bool>()) << item.key();
    }
  }
}

TEST(DbNetTest, WeightsRoundTripThroughAFile) {
  torch::manual_seed(1);
  DbNet a;
  torch::manual_seed(2);
  DbNet b;
  const auto path = dbh::testing::removed_at_exit(::testing::TempDir() + "/dbnet_weights.pt").string();
  a->save_weights(path);
  const auto loaded = b->load_weights(path);
  EXPECT_EQ(loaded, static_cast<int64_t>(a->parameters().size() + a->buffers().size()));
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
}

}  // namespace
}  // namespace dbh::model
