#include "model/backbone/resnet.h"

#include "model/nn/hooks.h"

namespace dbh::model {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

nn::Sequential downsample(int64_t in, int64_t out, int64_t stride) {
  nn::Sequential seq;
  seq->push_back("0", conv(in, out, 1, stride));
  seq->push_back("1", nn::BatchNorm2d(out));
  return seq;
}

// Two 3×3 convolutions (ResNet-18/34).
class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1 = register_module("conv1", conv(in, planes, 3, stride));
    bn1 = register_module("bn1", nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", conv(planes, planes, 3, 1));
    bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes) {
      down = register_module("downsample", downsample(in, planes, stride));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (down ? down->forward(x) : x));
  }

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential down{nullptr};
};
TORCH_MODULE(BasicBlock);

// 1×1 → 3×3 (strided) → 1×1 with expansion 4 (ResNet-50).
class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
    const int64_t out = planes * kExpansion;
    conv1 = register_module("conv1", conv(in, planes, 1, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", conv(planes, planes, 3, stride));
    bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    conv3 = register_module("conv3", conv(planes, out, 1, 1));
    bn3 = register_module("bn3", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down = register_module("downsample", downsample(in, out, stride));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = torch::relu(bn2(conv2(y)));
    y = bn3(conv3(y));
    return torch::relu(y + (down ? down->forward(x) : x));
  }

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential down{nullptr};
};
TORCH_MODULE(Bottleneck);

template <typename Block>
nn::Sequential make_layer(int64_t& in, int64_t planes, int64_t blocks,
                          int64_t stride) {
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    layer->push_back(std::to_string(i), Block(in, planes, i == 0 ? stride : 1));
    in = planes * Block::Impl::kExpansion;
  }
  return layer;
}

}  // namespace

ResNetImpl::ResNetImpl(const ResNetOptions& options_) : options(options_) {
  std::array<int64_t, 4> blocks{};
  bool bottleneck = false;
  switch (options.depth()) {
    case 18: blocks = {2, 2, 2, 2}; break;
    case 34: blocks = {3, 4, 6, 3}; break;
    case 50: blocks = {3, 4, 6, 3}; bottleneck = true; break;
    default:
      TORCH_CHECK(false, "Expected ResNet depth 18, 34 or 50, but got ",
                  options.depth());
  }
  TORCH_CHECK(options.in_channels() > 0,
              "Expected a positive input channel count, but got ",
              options.in_channels());
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(options.in_channels(), 64, 7)
                              .stride(2)
                              .padding(3)
                              .bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  int64_t in = 64;
  const std::array<int64_t, 4> planes{64, 128, 256, 512};
  std::array<nn::Sequential, 4> layers;
  for (size_t i = 0; i < 4; ++i) {
    const int64_t stride = i == 0 ? 1 : 2;
    layers[i] = bottleneck
                    ? make_layer<Bottleneck>(in, planes[i], blocks[i], stride)
                    : make_layer<BasicBlock>(in, planes[i], blocks[i], stride);
    out_channels_[i] = in;
  }
  layer1 = register_module("layer1", layers[0]);
  layer2 = register_module("layer2", layers[1]);
  layer3 = register_module("layer3", layers[2]);
  layer4 = register_module("layer4", layers[3]);
  // torchvision's ResNet initialisation: Kaiming-normal (fan_out, relu) convs,
  // BatchNorm γ = 1, β = 0.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      b->weight.fill_(1.0);
      b->bias.zero_();
    }
  }
}

ResNetFeatures ResNetImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(),
              "Expected an input of shape [N, ", options.in_channels(),
              ", H, W], but got ", x.sizes());
  TORCH_CHECK(x.size(2) % 32 == 0 && x.size(3) % 32 == 0,
              "Expected input height and width divisible by 32, but got ",
              x.size(2), "x", x.size(3),
              " (DBNet's neck adds feature maps upsampled by fixed factors; "
              "pad or resize to a multiple of 32)");
  const auto y = run_module("encoder.stem", [&] {
    return torch::max_pool2d(torch::relu(bn1(conv1(x))), 3, 2, 1);
  });
  ResNetFeatures f;
  f.c2 = run_module("encoder.layer1", [&] { return layer1->forward(y); });
  f.c3 = run_module("encoder.layer2", [&] { return layer2->forward(f.c2); });
  f.c4 = run_module("encoder.layer3", [&] { return layer3->forward(f.c3); });
  f.c5 = run_module("encoder.layer4", [&] { return layer4->forward(f.c4); });
  return f;
}

}  // namespace dbh::model
