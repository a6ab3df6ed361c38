#pragma once

#include <string>

#include <opencv2/core.hpp>

namespace dbh::harness {

/// Writes `image` as a PNG file at `path` as every file of an output folder
/// is written (write_file_atomically: complete or absent, never through a
/// link left in the folder). False when it cannot be encoded or written.
bool write_png(const std::string& path, const cv::Mat& image);

}  // namespace dbh::harness
