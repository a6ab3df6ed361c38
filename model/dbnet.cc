#include "model/dbnet.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "model/neck/fpn.h"
#include "model/neck/pan.h"
#include "model/nn/conv_bn_relu.h"

namespace dbh::model {

DbNetImpl::DbNetImpl(const DbNetOptions& options_) : options(options_) {
  encoder = register_module("encoder", ResNet(options.encoder()));
  const auto channels = encoder->out_channels();
  if (options.decoder() == DecoderKind::kFpn) {
    decoder = register_module("decoder", Fpn(FpnOptions(channels)).ptr());
  } else {
    decoder = register_module("decoder", Pan(PanOptions(channels)).ptr());
  }
  head = register_module(
      "head", DbHead(DbHeadOptions(decoder->out_channels())
                         .k(options.k())
                         .binarization(options.binarization())
                         .binarization_dtype(options.binarization_dtype())));
  db_init_(*decoder);
  db_init_(*head);
}

DbNetOutput DbNetImpl::forward(const torch::Tensor& image) {
  return head(decoder->forward(encoder(image)));
}

void DbNetImpl::set_binarization(Binarization form, torch::Dtype dtype) {
  options.binarization(form).binarization_dtype(dtype);
  head->options.binarization(form).binarization_dtype(dtype);
}

std::vector<std::string> DbNetImpl::module_names() const {
  std::vector<std::string> names;
  for (const auto& item : named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    names.push_back(item.key());
  }
  return names;
}

void DbNetImpl::save_weights(const std::string& path) const {
  torch::serialize::OutputArchive archive;
  for (const auto& p : named_parameters(/*recurse=*/true)) {
    archive.write(p.key(), p.value());
  }
  for (const auto& b : named_buffers(/*recurse=*/true)) {
    archive.write(b.key(), b.value(), /*is_buffer=*/true);
  }
  save_archive(archive, path);
}

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
  int error = 0;
  archive.save_to([&](const void* data, size_t n) -> size_t {
    const char* p = static_cast<const char*>(data);
    for (size_t left = n; left > 0 && error == 0;) {
      const ssize_t w = ::write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error = w < 0 ? errno : ENOSPC;
        break;
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
    return n;  // the writer goes on; the error is reported below
  });
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(path.c_str());
    throw std::runtime_error(path + ": cannot write: " + std::strerror(error));
  }
}

int64_t DbNetImpl::load_weights(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  int64_t loaded = 0;
  auto load = [&](const std::string& name, torch::Tensor& target, bool buffer) {
    torch::Tensor value;
    if (!archive.try_read(name, value, buffer)) return;
    if (value.sizes() != target.sizes()) return;
    target.copy_(value);
    ++loaded;
  };
  for (auto& p : named_parameters(/*recurse=*/true)) load(p.key(), p.value(), false);
  for (auto& b : named_buffers(/*recurse=*/true)) load(b.key(), b.value(), true);
  return loaded;
}

}  // namespace dbh::model
