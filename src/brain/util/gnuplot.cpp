// Figures through gnuplot (see gnuplot.h).
#include "brain/util/gnuplot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"

namespace scaleinv {

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                          "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kPaletteSize = 10;

// A double-quoted gnuplot string.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool plottable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

}  // namespace

std::string gnuplot_script(const PlotFigure& fig, const std::string& terminal, const std::string& out_path) {
  const int n = static_cast<int>(fig.panels.size());
  const int cols = fig.columns > 0 ? fig.columns : std::max(1, std::min(n, 4));
  const int rows = std::max(1, (n + cols - 1) / cols);
  const int title_px = fig.title.empty() ? 0 : 30;
  const int W = cols * fig.panel_width, H = rows * fig.panel_height + title_px;
  std::string s;
  if (terminal == "svg")
    s += fmt::format("set terminal svg size {},{} noenhanced font 'Helvetica,11' background '#ffffff'\n", W, H);
  else
    s += fmt::format("set terminal pngcairo size {},{} noenhanced font 'Helvetica,10' background '#ffffff'\n", W, H);
  s += "set output " + quote(out_path) + "\n";
  // Data blocks first (gnuplot needs them defined before multiplot's plots use them).
  for (int p = 0; p < n; ++p) {
    const PlotPanel& panel = fig.panels[static_cast<size_t>(p)];
    for (size_t k = 0; k < panel.series.size(); ++k) {
      const PlotSeries& ser = panel.series[k];
      s += fmt::format("$D{}_{} << EOD\n", p, k);
      for (size_t i = 0; i < ser.x.size() && i < ser.y.size(); ++i)
        if (plottable(ser.x[i], panel.logx) && plottable(ser.y[i], panel.logy))
          s += fmt::format("{:.10g} {:.10g}\n", ser.x[i], ser.y[i]);
      s += "EOD\n";
    }
  }
  s += "set grid xtics ytics mytics lc rgb '#dddddd'\n";
  s += "set key outside right top vertical font ',8' spacing 0.85 samplen 1.5\n";
  s += "set format y '%.0e'\n";
  s += fmt::format("set multiplot layout {},{} title {}\n", rows, cols, quote(fig.title));
  for (int p = 0; p < n; ++p) {
    const PlotPanel& panel = fig.panels[static_cast<size_t>(p)];
    s += "unset logscale\n";
    if (panel.logx) s += "set logscale x 2\n";
    if (panel.logy) s += "set logscale y 10\n";
    s += "set format y " + quote(panel.yformat) + "\n";
    s += "set title " + quote(panel.title) + "\n";
    s += "set xlabel " + quote(panel.xlabel) + "\n";
    s += "set ylabel " + quote(panel.ylabel) + "\n";
    std::vector<std::string> parts;
    for (size_t k = 0; k < panel.series.size(); ++k) {
      const PlotSeries& ser = panel.series[k];
      bool any = false;
      for (size_t i = 0; i < ser.x.size() && i < ser.y.size(); ++i)
        any = any || (plottable(ser.x[i], panel.logx) && plottable(ser.y[i], panel.logy));
      if (!any) continue;
      const char* color = kPalette[((ser.color % kPaletteSize) + kPaletteSize) % kPaletteSize];
      std::string style;
      if (ser.dashed)
        style = fmt::format("with lines dt 2 lw 1.5 lc rgb '{}'", color);
      else if (ser.points)
        style = fmt::format("with linespoints pt 7 ps 0.6 lw 1.5 lc rgb '{}'", color);
      else
        style = fmt::format("with lines lw 1.5 lc rgb '{}'", color);
      parts.push_back(fmt::format("$D{}_{} using 1:2 {} {}", p, k, style,
                                  ser.title.empty() ? std::string("notitle") : "title " + quote(ser.title)));
    }
    if (parts.empty()) {
      // An empty panel still takes its place in the layout.
      s += "set label 1 'no data' at graph 0.5, graph 0.5 center\nunset logscale\nplot [0:1][0:1] NaN notitle\n"
           "unset label 1\n";
      continue;
    }
    s += "plot ";
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", \\\n     " : "") + parts[i];
    s += "\n";
  }
  s += "unset multiplot\nset output\n";
  return s;
}

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

void require_gnuplot(const std::string& field) {
  if (!gnuplot_available())
    throw UserError("command line", field, "the gnuplot program is not installed",
                    "install gnuplot-nox (apt-get install gnuplot-nox) or leave out " + field);
}

void render_figure(const PlotFigure& fig, const std::string& path_stem) {
  namespace fs = std::filesystem;
  const fs::path stem(path_stem);
  require_gnuplot("--plot");
  if (stem.has_parent_path()) fs::create_directories(stem.parent_path());
  for (const char* ext : {"svg", "png"}) refuse_protected_input(path_stem + "." + ext);  // before either is drawn
  for (const char* ext : {"svg", "png"}) {
    const std::string final_path = path_stem + "." + ext;
    const std::string tmp_out = unique_temp_path(final_path);
    const std::string script_path = unique_temp_path(path_stem + "." + ext + ".gp");
    const std::string err_path = script_path + ".err";
    write_file_atomic(script_path, gnuplot_script(fig, ext, tmp_out));
    const std::string cmd = "gnuplot " + shell_quote(script_path) + " 2>" + shell_quote(err_path);
    const int status = std::system(cmd.c_str());
    std::string err;
    try {
      err = read_file(err_path);
    } catch (const UserError&) {
    }
    std::error_code ec;
    fs::remove(script_path, ec);
    fs::remove(err_path, ec);
    const bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && fs::exists(tmp_out);
    if (!ok) {
      fs::remove(tmp_out, ec);
      std::string first;
      for (char c : err) {
        if (c == '\n' && !first.empty()) break;
        if (c != '\n') first += c;
      }
      throw UserError(final_path, "--plot", "gnuplot failed: " + (first.empty() ? std::string("(no message)") : first),
                      "check that gnuplot has the svg and pngcairo terminals (gnuplot-nox does)");
    }
    fs::rename(tmp_out, final_path);
  }
}

}  // namespace scaleinv
