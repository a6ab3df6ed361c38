#include "harness/report/html_page.h"

#include <cctype>

#include "harness/common/text.h"

namespace dbh::harness {
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

}  // namespace dbh::harness
