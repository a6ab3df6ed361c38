#include "harness/common/png.h"

#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"

namespace dbh::harness {

bool write_png(const std::string& path, const cv::Mat& image) {
  std::vector<uchar> png;
  if (!cv::imencode(".png", image, png)) return false;
  try {
    write_file_atomically(path, std::string(png.begin(), png.end()));
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace dbh::harness
