#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <opencv2/core/mat.hpp>

namespace dbh::model {

/// Why an image file did not decode, in the words of a defect message:
/// "expected <expected> at <file>, got <got>".
struct DecodeFailure {
  std::string expected;  ///< e.g. "a complete JPEG image"
  std::string got;       ///< e.g. "a decode warning: Premature end of JPEG file"
};

/// Decodes an image file to BGR 8-bit whatever it holds: 8/16-bit,
/// grayscale, alpha (dropped). EXIF orientation is ignored unless
/// `apply_exif` (spec §11 pitfall 11: annotations usually refer to the stored
/// pixels).
///
/// Decoding is strict: an image that is truncated or corrupt does not decode,
/// even where OpenCV would return a partly grey image. JPEG streams (by their
/// magic bytes, whatever the file name) are first read to the end with
/// libjpeg, every libjpeg warning ("Premature end of JPEG file", "Corrupt
/// JPEG data: …") counting as an error (check_jpeg_stream); PNG streams must
/// end with an IEND chunk and every chunk must match its CRC
/// (check_png_stream). The pixels then come from OpenCV, so an intact file
/// decodes exactly as cv::imread decodes it.
///
/// Returns an empty Mat when the file cannot be decoded, and then fills
/// `failure` (when not null) with what was expected and what was found.
/// Never throws.
/// The most pixels an image may have (8192 × 8192). A PNG or JPEG header
/// announcing more is a defect named before anything is decoded: a few
/// hundred kilobytes of compressed zeros must not become gigabytes in every
/// loader thread (a decompression bomb). Other formats are held to the same
/// limit through OpenCV's own (OPENCV_IO_MAX_IMAGE_PIXELS, set by `dbh`).
inline constexpr int64_t kMaxImagePixels = int64_t{8192} * 8192;

/// The largest image file read (512 MiB): what kMaxImagePixels pixels of
/// 16-bit RGBA take uncompressed. A larger file is a defect named before it
/// is read, never a file read whole into memory.
inline constexpr int64_t kMaxImageFileBytes = kMaxImagePixels * 8;

/// What is at `path` when it is not a regular file ("nothing", "a folder",
/// "a FIFO", …), for "expected an image file, got …"; empty for a regular
/// file (links followed).
std::string describe_non_file(const std::string& path);

/// Width and height a PNG (IHDR) or JPEG (first SOF marker) stream announces
/// in its header; {0, 0} when the stream is neither or has no such header.
std::pair<int64_t, int64_t> announced_image_size(const unsigned char* data, size_t size);

cv::Mat decode_image(const std::string& path, bool apply_exif = false,
                     DecodeFailure* failure = nullptr);

/// Whether `data` starts with the JPEG (FF D8 FF) or PNG signature.
bool is_jpeg_stream(const unsigned char* data, size_t size);
bool is_png_stream(const unsigned char* data, size_t size);

/// Reads a whole JPEG stream with libjpeg (headers, every scan, up to EOI)
/// with an error manager that turns warnings into errors. Returns "" when
/// the stream is complete, else what was found: "a decode warning: <libjpeg
/// message>" or "a decode error: <libjpeg message>". JPEG carries no
/// checksum: corrupt data shows where it breaks the stream's structure (a bad
/// Huffman code, a misplaced marker, data missing or left over at the end),
/// as truncation always does and a few flipped bits may not. The one
/// warning about metadata (an unknown JFIF revision number) does not count:
/// it says nothing about the image data. Never throws; thread-safe.
std::string check_jpeg_stream(const unsigned char* data, size_t size);

/// Walks the chunks of a PNG stream: each must be complete and match its
/// CRC, the first must be IHDR, and the stream must reach IEND (bytes after
/// IEND are ignored). Returns "" when the stream is complete, else what was
/// found, e.g. "a truncated stream: it ends inside chunk IDAT (which
/// starts at byte 33), before the IEND chunk". Does not inflate the image
/// data (OpenCV's decoder checks it). Never throws.
std::string check_png_stream(const unsigned char* data, size_t size);

}  // namespace dbh::model
