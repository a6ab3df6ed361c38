#include "model/data/image_decode.h"

#include <array>
#include <cerrno>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace dbh::model {

namespace {

// libjpeg reports through callbacks that must not return on errors; this
// error manager jumps back to check_jpeg_stream with libjpeg's message.
struct StrictJpegErrors {
  jpeg_error_mgr pub;  // first member: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  bool warning;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_stop(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<StrictJpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// msg_level -1 is a warning (corrupt or missing data that libjpeg papers
// over with grey), 0 and above are trace messages.
void jpeg_warning_is_error(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JFIF_MAJOR) return;  // the JFIF header's version, not the image data
  reinterpret_cast<StrictJpegErrors*>(cinfo->err)->warning = true;
  jpeg_stop(cinfo);
}

// CRC-32 of the PNG specification (ISO 3309, polynomial 0xEDB88320).
uint32_t png_crc(const unsigned char* data, size_t size) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool is_chunk_type(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) {
    const bool letter = (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z');
    if (!letter) return false;
  }
  return true;
}

constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// Any decoded depth and channel count → 8-bit BGR (empty if unsupported).
cv::Mat to_bgr8(const cv::Mat& raw) {
  cv::Mat img8;
  if (raw.depth() == CV_16U) {
    raw.convertTo(img8, CV_8U, 1.0 / 257.0);
  } else if (raw.depth() == CV_32F || raw.depth() == CV_64F) {
    raw.convertTo(img8, CV_8U, 255.0);
  } else if (raw.depth() != CV_8U) {
    raw.convertTo(img8, CV_8U);
  } else {
    img8 = raw;
  }
  cv::Mat bgr;
  switch (img8.channels()) {
    case 1: cv::cvtColor(img8, bgr, cv::COLOR_GRAY2BGR); break;
    case 3: bgr = img8; break;
    case 4: cv::cvtColor(img8, bgr, cv::COLOR_BGRA2BGR); break;
    default: return {};
  }
  return bgr;
}

}  // namespace

bool is_jpeg_stream(const unsigned char* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

bool is_png_stream(const unsigned char* data, size_t size) {
  return size >= sizeof(kPngSignature) && std::memcmp(data, kPngSignature, sizeof(kPngSignature)) == 0;
}

std::string check_jpeg_stream(const unsigned char* data, size_t size) {
  // Only trivially destructible objects live between setjmp and longjmp.
  jpeg_decompress_struct cinfo;
  StrictJpegErrors errors;
  errors.warning = false;
  errors.message[0] = '\0';
  cinfo.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = jpeg_stop;
  errors.pub.emit_message = jpeg_warning_is_error;
  if (setjmp(errors.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return std::string(errors.warning ? "a decode warning: " : "a decode error: ") + errors.message;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // Entropy-decodes every scan (where truncation and corrupt data show) up
  // to EOI, without the inverse DCT and colour conversion.
  jpeg_read_coefficients(&cinfo);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return {};
}

std::string check_png_stream(const unsigned char* data, size_t size) {
  if (!is_png_stream(data, size)) return "a stream without the PNG signature";
  size_t pos = sizeof(kPngSignature);
  bool first = true;
  for (;;) {
    const std::string at = " at byte " + std::to_string(pos);
    if (size - pos < 8) {
      return "a truncated stream: it ends" + at + ", before the IEND chunk";
    }
    const unsigned char* chunk = data + pos;
    const uint32_t length = big_endian32(chunk);
    if (!is_chunk_type(chunk + 4) || length > 0x7FFFFFFFu) {
      return "a corrupt chunk header" + at;
    }
    const std::string type(reinterpret_cast<const char*>(chunk + 4), 4);
    if (size - pos - 8 < static_cast<size_t>(length) + 4) {
      return "a truncated stream: it ends inside chunk " + type + " (which starts" + at +
             "), before the IEND chunk";
    }
    if (png_crc(chunk + 4, static_cast<size_t>(length) + 4) != big_endian32(chunk + 8 + length)) {
      return "a corrupt chunk: " + type + at + " does not match its CRC";
    }
    if (first && type != "IHDR") return "chunk " + type + at + " where IHDR must come first";
    first = false;
    if (type == "IEND") return {};
    pos += static_cast<size_t>(length) + 12;
  }
}

std::pair<int64_t, int64_t> announced_image_size(const unsigned char* data, size_t size) {
  auto be16 = [&](size_t at) { return (int64_t{data[at]} << 8) | data[at + 1]; };
  if (is_png_stream(data, size)) {
    if (size < 24) return {0, 0};
    return {static_cast<int64_t>(big_endian32(data + 16)), static_cast<int64_t>(big_endian32(data + 20))};
  }
  if (!is_jpeg_stream(data, size)) return {0, 0};
  size_t pos = 2;
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) return {0, 0};
    const unsigned marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD9)) {  // markers without a length
      pos += 2;
      continue;
    }
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (pos + 9 > size) return {0, 0};
      return {be16(pos + 7), be16(pos + 5)};
    }
    if (marker == 0xDA) return {0, 0};  // scan data before any frame header
    pos += 2 + static_cast<size_t>(be16(pos + 2));
  }
  return {0, 0};
}

std::string describe_non_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return fs::is_symlink(fs::symlink_status(path, ec)) ? "a dangling link" : "nothing";
  if (fs::is_regular_file(st)) return "";
  if (fs::is_directory(st)) return "a folder";
  if (fs::is_fifo(st)) return "a FIFO";
  if (fs::is_character_file(st) || fs::is_block_file(st)) return "a device";
  if (fs::is_socket(st)) return "a socket";
  return "a special file";
}

cv::Mat decode_image(const std::string& path, bool apply_exif, DecodeFailure* failure) {
  auto fail = [&](std::string expected, std::string got) {
    if (failure != nullptr) *failure = {std::move(expected), std::move(got)};
    return cv::Mat();
  };
  if (const std::string what = describe_non_file(path); !what.empty()) return fail("an image file", what);
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && static_cast<int64_t>(size) > kMaxImageFileBytes) {
    return fail("an image file of at most " + std::to_string(kMaxImageFileBytes >> 20) +
                    " MiB (what 8192 × 8192 pixels of 16-bit RGBA take)",
                "a file of " + std::to_string((size + (1u << 20) - 1) >> 20) + " MiB");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("a readable image file", std::string("an error: ") + std::strerror(errno));
  // The signature decides how strictly the file is checked.
  std::vector<unsigned char> bytes(sizeof(kPngSignature));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  const bool jpeg = is_jpeg_stream(bytes.data(), bytes.size());
  const bool png = is_png_stream(bytes.data(), bytes.size());
  const int flags = apply_exif ? cv::IMREAD_UNCHANGED : cv::IMREAD_UNCHANGED | cv::IMREAD_IGNORE_ORIENTATION;
  cv::Mat raw;
  if (jpeg || png) {
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return fail("a readable image file", std::string("an error: ") + std::strerror(errno));
    const auto [width, height] = announced_image_size(bytes.data(), bytes.size());
    if (width > 0 && height > 0 && width * height > kMaxImagePixels) {
      return fail("an image of at most " + std::to_string(kMaxImagePixels) + " pixels (8192 × 8192)",
                  "a header announcing " + std::to_string(width) + " × " + std::to_string(height));
    }
    // JPEG first: OpenCV would decode a broken JPEG with a grey fill.
    if (jpeg) {
      const std::string problem = check_jpeg_stream(bytes.data(), bytes.size());
      if (!problem.empty()) return fail("a complete JPEG image", problem);
    }
    raw = cv::imdecode(bytes, flags);
    if (raw.empty()) return fail("a decodable image", "bytes OpenCV cannot decode");
    // PNG after OpenCV, which already rejects a PNG that stops inside its
    // image data; the chunk walk catches what a decoder lets through (a
    // chunk that fails its CRC, a stream that never reaches IEND).
    if (png) {
      const std::string problem = check_png_stream(bytes.data(), bytes.size());
      if (!problem.empty()) return fail("a complete PNG image", problem);
    }
    if (apply_exif && raw.depth() == CV_8U) {
      // IMREAD_UNCHANGED skips EXIF handling; decode again in colour to apply it.
      cv::Mat oriented = cv::imdecode(bytes, cv::IMREAD_COLOR);
      if (!oriented.empty()) raw = oriented;
    }
  } else {
    in.close();
    raw = cv::imread(path, flags);
    if (raw.empty()) return fail("a decodable image", "bytes OpenCV cannot decode");
    if (apply_exif && raw.depth() == CV_8U) {
      cv::Mat oriented = cv::imread(path, cv::IMREAD_COLOR);
      if (!oriented.empty()) raw = oriented;
    }
  }
  cv::Mat bgr = to_bgr8(raw);
  if (bgr.empty()) {
    return fail("an image with 1, 3 or 4 channels", "one with " + std::to_string(raw.channels()));
  }
  return bgr;
}

}  // namespace dbh::model
