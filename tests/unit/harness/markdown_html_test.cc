#include "harness/report/markdown_html.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/common/text.h"

namespace dbh::harness {
namespace {

// The rendered Markdown: the page between <body> and the footer.
std::string body_of(const std::string& page) {
  const size_t a = page.find("<body>\n");
  const size_t b = page.rfind("<hr><p class=\"sub\">Written by dbh");
  if (a == std::string::npos || b == std::string::npos || b < a) return "(no body) " + page;
  return page.substr(a + 7, b - a - 7);
}

std::string render(const std::string& md) {
  return body_of(report::markdown_page_html("t", md));
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(MarkdownHtmlTest, PageIsSelfContainedWithTheTitleAndNoScript) {
  const std::string page = report::markdown_page_html("Diagnosis: <b>x</b> & \"y\"", "# Diagnosis\n\nText.\n");
  EXPECT_EQ(page.rfind("<!DOCTYPE html>\n", 0), 0u);
  EXPECT_TRUE(contains(page,
                       "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                       "img-src data:; style-src 'unsafe-inline'\">"));
  EXPECT_TRUE(contains(page, "<title>Diagnosis: &lt;b&gt;x&lt;/b&gt; &amp; &quot;y&quot;</title>"));
  EXPECT_TRUE(contains(page, "<style>"));
  EXPECT_FALSE(contains(page, "<script"));
  EXPECT_FALSE(contains(page, "<link"));
  EXPECT_TRUE(contains(page, "</body>\n</html>\n"));
}

TEST(MarkdownHtmlTest, Headings) {
  EXPECT_EQ(render("# One\n## Two\n### Three ###\n#not a heading\n"),
            "<h1>One</h1>\n<h2>Two</h2>\n<h3>Three</h3>\n<p>#not a heading</p>\n");
}

TEST(MarkdownHtmlTest, ParagraphsJoinLinesAndSplitAtBlankLines) {
  EXPECT_EQ(render("one\ntwo\n\nthree\r\n"), "<p>one\ntwo</p>\n<p>three</p>\n");
}

TEST(MarkdownHtmlTest, InlineCodeBoldAndEscapes) {
  EXPECT_EQ(render("a `x < y` and **bold `c`** \\*not\\* \\`tick\\` `` a`b ``\n"),
            "<p>a <code>x &lt; y</code> and <strong>bold <code>c</code></strong> *not* `tick` "
            "<code>a`b</code></p>\n");
  // Unclosed markup is text.
  EXPECT_EQ(render("**open and `open\n"), "<p>**open and `open</p>\n");
}

// markdown_code: the text verbatim in the rendered page, whatever backticks,
// underscores or backslashes it holds.
TEST(MarkdownHtmlTest, CodeSpansKeepTheirTextVerbatim) {
  EXPECT_EQ(markdown_code("data.on_invalid=skip"), "`data.on_invalid=skip`");
  EXPECT_EQ(markdown_code("a`b"), "``a`b``");
  EXPECT_EQ(markdown_code("`x``"), "``` `x`` ```");
  EXPECT_EQ(markdown_code("two\nlines"), "`two lines`");
  EXPECT_EQ(markdown_code(""), "` `");
  for (const std::string text : {"data.on_invalid=skip", "a`b", "`x``", "C:\\dir\\*_x_*", "x | y [z](w)"}) {
    EXPECT_TRUE(contains(render("see " + markdown_code(text) + " here\n"),
                         "<code>" + xml_escape(text) + "</code>"))
        << text << " -> " << render("see " + markdown_code(text) + " here\n");
  }
}

TEST(MarkdownHtmlTest, Table) {
  EXPECT_EQ(render("| check | result |\n|---|:--:|\n| a `x\\|y` | **fails** |\n| b |\n"),
            "<table>\n<thead>\n<tr><th>check</th><th>result</th></tr>\n</thead>\n<tbody>\n"
            "<tr><td>a <code>x|y</code></td><td><strong>fails</strong></td></tr>\n"
            "<tr><td>b</td><td></td></tr>\n</tbody>\n</table>\n");
}

TEST(MarkdownHtmlTest, ATableRowWithMoreCellsThanTheHeaderKeepsItsText) {
  EXPECT_EQ(render("| a | b |\n|---|---|\n| 1 | 2 | 3 <i> |\n"),
            "<table>\n<thead>\n<tr><th>a</th><th>b</th></tr>\n</thead>\n<tbody>\n"
            "<tr><td>1</td><td>2 | 3 &lt;i&gt;</td></tr>\n</tbody>\n</table>\n");
}

TEST(MarkdownHtmlTest, NumberedListWithNestedBullets) {
  EXPECT_EQ(render("1. **First** (2 for)\n   - supports: x\n   - refutes: y\n2. Second\n"),
            "<ol>\n<li><strong>First</strong> (2 for)\n<ul>\n<li>supports: x</li>\n<li>refutes: y</li>\n</ul>\n"
            "</li>\n<li>Second</li>\n</ol>\n");
}

TEST(MarkdownHtmlTest, BulletedListContinuationAndStartNumber) {
  EXPECT_EQ(render("- a\n  continued\n- b\n\n3. c\n"),
            "<ul>\n<li>a\ncontinued</li>\n<li>b</li>\n</ul>\n<ol start=\"3\">\n<li>c</li>\n</ol>\n");
  // A list ends at a line that is neither an item nor indented.
  EXPECT_EQ(render("- a\nafter\n"), "<ul>\n<li>a</li>\n</ul>\n<p>after</p>\n");
}

TEST(MarkdownHtmlTest, FencedCodeIsVerbatimAndEscaped) {
  EXPECT_EQ(render("```sh\ndbh run 'a b' **x** <y> &\n```\nafter\n"),
            "<pre><code>dbh run &apos;a b&apos; **x** &lt;y&gt; &amp;\n</code></pre>\n<p>after</p>\n");
}

TEST(MarkdownHtmlTest, AnUnterminatedFenceRunsToTheEndAsCode) {
  EXPECT_EQ(render("text\n```\n# not a heading\n<script>alert(1)</script>\n"),
            "<p>text</p>\n<pre><code># not a heading\n&lt;script&gt;alert(1)&lt;/script&gt;\n</code></pre>\n");
}

TEST(MarkdownHtmlTest, FrontMatterIsNotShownAndRulesAre) {
  EXPECT_EQ(render("---\ntitle: \"x\"\n---\n\n# Report\n\n---\n"), "<h1>Report</h1>\n<hr>\n");
}

TEST(MarkdownHtmlTest, RelativeLinksOnly) {
  EXPECT_EQ(render("[the **plot**](probes/a@b.png) [up](../bisect.md) [c](x\\_y.md)\n"),
            "<p><a href=\"./probes/a%40b.png\">the <strong>plot</strong></a> <a href=\"../bisect.md\">up</a> "
            "<a href=\"./x_y.md\">c</a></p>\n");
  // Anything with a scheme, an absolute or host-relative path, or a
  // fragment is shown as written, never as a link.
  for (const std::string target :
       {"javascript:alert(1)", "JavaScript:alert(1)", "https://example.com/x", "//example.com", "/etc/passwd",
        "data:text/html,x", "file:///etc/passwd", "#top", "a b"}) {
    const std::string html = render("[x](" + target + ")\n");
    EXPECT_FALSE(contains(html, "<a ")) << target << ": " << html;
    EXPECT_TRUE(contains(html, xml_escape(target))) << target << ": " << html;
  }
}

TEST(MarkdownHtmlTest, HostileTextNeverOpensMarkup) {
  const std::string hostile =
      "# <script>alert(1)</script>\n\n"
      "Scenario `\"><img src=x onerror=alert(1)>` said <img src=x \"onerror=alert(1)\"> & 'q'\n\n"
      "| <b>h</b> | x |\n|---|---|\n| \"onerror=alert(1) | <svg onload=alert(1)> |\n\n"
      "- **<iframe src=javascript:alert(1)>**\n\n"
      "[<script>](x\"onmouseover=alert(1))\n\n"
      "bad bytes \xff\xfe\xc0 and \x01 control\n";
  const std::string page = report::markdown_page_html("<script>alert(1)</script>", hostile);
  EXPECT_FALSE(contains(page, "<script")) << page;
  EXPECT_FALSE(contains(page, "<img")) << page;
  EXPECT_FALSE(contains(page, "<svg")) << page;
  EXPECT_FALSE(contains(page, "<iframe")) << page;
  EXPECT_FALSE(contains(page, "<b>")) << page;
  EXPECT_FALSE(contains(page, "\"onerror")) << page;
  EXPECT_FALSE(contains(page, "\"onmouseover")) << page;
  EXPECT_TRUE(contains(page, "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>")) << page;
  EXPECT_TRUE(contains(page, "<code>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</code>")) << page;
  EXPECT_TRUE(contains(page, "<td>&quot;onerror=alert(1)</td>")) << page;
  // The link's target has a quote in it; the attribute keeps it encoded.
  EXPECT_TRUE(contains(page, "<a href=\"./x%22onmouseover%3Dalert%281\">&lt;script&gt;</a>)")) << page;
  EXPECT_TRUE(contains(page, "bad bytes \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD and \xEF\xBF\xBD control")) << page;
  EXPECT_EQ(valid_utf8(page), page);
}

TEST(MarkdownHtmlTest, DeeplyNestedMarkupStaysBounded) {
  std::string md;
  for (int i = 0; i < 50; ++i)
    md += "**[";
  md += "x";
  const std::string html = render(md + "\n");
  EXPECT_TRUE(contains(html, "x")) << html;
  EXPECT_FALSE(contains(html, "<a ")) << html;
}

TEST(MarkdownHtmlTest, UnclosedMarkupCostsLinearTime) {
  // Backtick runs of many lengths, unclosed brackets, link openings and
  // bold markers: the page comes back at once.
  std::string md;
  for (int i = 0; i < 2000; ++i)
    md += std::string(static_cast<size_t>(i % 50 + 1), '`') + " [a](b **";
  for (int i = 0; i < 20000; ++i)
    md += "[";
  const std::string html = render(md + "\n");
  EXPECT_FALSE(contains(html, "<a ")) << html.substr(0, 200);
}

}  // namespace
}  // namespace dbh::harness
