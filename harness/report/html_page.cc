#include "harness/report/html_page.h"

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/scenario/scenario.h"

namespace dbh::harness::report {
namespace fs = std::filesystem;
namespace {

const char* kCss = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1150px;padding:16px 24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.sub{color:#59636e;margin:0 0 12px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:170px}
tr.hl td{background:#fff5f5}tr.gap td{text-align:center;color:#59636e;font-style:italic}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;color:#fff;background:#6e7781}
.bad{background:#cf222e}.ok{background:#1a7f37}.warn{background:#9a6700}
.met{color:#1a7f37;font-weight:600}.unmet{color:#cf222e;font-weight:600}
.nonfinite{color:#cf222e;font-weight:600}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all;font-size:12px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
figure{display:inline-block;margin:6px 12px 6px 0;vertical-align:top}
figure img{border:1px solid #d0d7de;max-width:100%}
img.overlay{width:192px;image-rendering:pixelated}
figcaption{font-size:12px;color:#59636e;max-width:340px;word-break:break-all}
.note{color:#9a6700}
.totals span{margin-right:16px}
table.events td:last-child{word-break:break-all}
li ul,li ol{margin:2px 0}
)css";

}  // namespace

std::string html_page_head(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
         "style-src 'unsafe-inline'\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         "<meta name=\"generator\" content=\"dbh\">\n<title>" +
         xml_escape(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
}

std::string html_url_path(const std::string& rel) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : rel) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  // "./" keeps a first segment holding ':' (already encoded) from ever
  // reading as a scheme, and makes the link visibly relative.
  return out.rfind("../", 0) == 0 ? out : "./" + out;
}


// --- Embedded images ---------------------------------------------------------

std::string base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> read_small_file(const std::string& path, size_t max, uintmax_t* size) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  *size = fs::file_size(path, ec);
  if (ec || *size > max) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return std::nullopt;
  return data;
}

std::string ImageEmbedder::figure(const std::string& rel, const std::string& caption, const std::string& img_class) {
  const fs::path file = fs::path(root_) / rel;
  const std::string link = "<a href=\"" + xml_escape(html_url_path(rel)) + "\"><code>" + xml_escape(rel) + "</code></a>";
  std::error_code ec;
  // Note [Files a worker names] (supervisor/event_digest.cc): a file that
  // resolves outside the report's folder (through "..", an absolute name or
  // a link a worker left) is never read, nor said to exist.
  if (!path_within(file.string(), root_)) {
    return "<p class=\"note\">" + xml_escape(caption) + ": <code>" + xml_escape(rel) +
           "</code> is outside the report's folder: not embedded.</p>\n";
  }
  if (!fs::is_regular_file(file, ec)) {
    return "<p class=\"note\">" + xml_escape(caption) + ": <code>" + xml_escape(rel) + "</code> is missing.</p>\n";
  }
  uintmax_t size = fs::file_size(file, ec);
  if (ec || size > kHtmlMaxImageBytes) {
    return "<p class=\"note\">" + xml_escape(caption) + ": " + link + " not embedded: " + xml_escape(scenario::format_bytes(int64_t(size))) +
           " is over the " + xml_escape(scenario::format_bytes(int64_t(kHtmlMaxImageBytes))) + " limit for one image.</p>\n";
  }
  if (used_ + size > kHtmlMaxEmbeddedBytes) {
    return "<p class=\"note\">" + xml_escape(caption) + ": " + link + " not embedded: the page already holds " +
           xml_escape(scenario::format_bytes(int64_t(used_))) + " of images.</p>\n";
  }
  const auto data = read_small_file(file.string(), kHtmlMaxImageBytes, &size);
  if (!data) return "<p class=\"note\">" + xml_escape(caption) + ": " + link + " could not be read.</p>\n";
  std::string mime;
  if (data->rfind("\x89PNG\r\n\x1a\n", 0) == 0) {
    mime = "image/png";
  } else if (data->rfind("\xFF\xD8\xFF", 0) == 0) {
    mime = "image/jpeg";
  } else {
    return "<p class=\"note\">" + xml_escape(caption) + ": " + link + " is not a PNG or JPEG image.</p>\n";
  }
  used_ += data->size();
  return "<figure><img class=\"" + xml_escape(img_class) + "\" alt=\"" + xml_escape(caption) + "\" src=\"data:" + mime +
         ";base64," + base64(*data) + "\"><figcaption>" + xml_escape(caption) + "</figcaption></figure>\n";
}

}  // namespace dbh::harness::report
