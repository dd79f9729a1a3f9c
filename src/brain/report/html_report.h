#pragma once
// The transfer report (issue 8): the analysis of brain/report/transfer.h as a self-contained HTML page
// (plots inlined as base64 PNG data URIs, no external resources; a headline verdict per
// parameterization; tables), a markdown summary and the numbers as JSON.
//
// The page carries a small script that, once loaded, counts the <img> elements that decoded
// (naturalWidth > 0) into body[data-images-loaded] next to body[data-images-total]; the HTML test
// reads both from headless Chromium's DOM dump.
#include <string>
#include <vector>

#include "brain/report/transfer.h"

namespace scaleinv {

struct ReportFigure {
  std::string caption;
  std::string png_path;   // read and inlined
};

// A section placed before the transfer analysis (the demo puts its theory verdicts and coordinate
// checks there): a heading, trusted HTML, and figures inlined like the transfer plots.
struct HtmlSection {
  std::string title;
  std::string html;
  std::vector<ReportFigure> figures;
};

struct TransferReportFiles {
  std::string html, markdown, json;
  std::vector<std::string> plots;   // PNG and SVG files written
  int images = 0;                   // <img> elements in report.html
};

// The markdown summary table (one row per parameterization and scaling axis), also printed by
// `scaleinv transfer-report`.
std::string transfer_markdown(const TransferAnalysis& a);

// The HTML page; figures' PNGs are read and inlined.
std::string transfer_html(const TransferAnalysis& a, const std::vector<ReportFigure>& figures,
                          const std::vector<HtmlSection>& before = {}, const std::string& title = "");

// Writes DIR/report.html, DIR/summary.md, DIR/transfer.json and the plots (DIR/*.png, *.svg),
// each file atomically. Without gnuplot the report has no plots and says so.
// `before` and `title` (the page's heading; default "Hyperparameter transfer: NAME") as in transfer_html.
TransferReportFiles write_transfer_report(const TransferAnalysis& a, const std::string& dir,
                                          const std::vector<HtmlSection>& before = {}, const std::string& title = "");

std::string base64_encode(const std::string& bytes);
// &, <, >, " as HTML entities (text and attribute values).
std::string html_escape(const std::string& s);

}  // namespace scaleinv
