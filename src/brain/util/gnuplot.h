#pragma once
// Plots through the gnuplot program (docs/design.md "Dependencies": gnuplot-nox, SVG and PNG). This is
// a thin description of a figure (panels of line series) turned into one gnuplot script with the
// data inline; gnuplot does all the drawing.
#include <string>
#include <vector>

namespace scaleinv {

struct PlotSeries {
  std::string title;        // legend entry ("" : none)
  std::vector<double> x, y;
  int color = 0;            // index into a fixed palette (series sharing a colour belong together)
  bool dashed = false;      // dashed line without points (predictions, guides)
  bool points = true;       // markers on the data points (solid lines)
};

struct PlotPanel {
  std::string title;
  std::string xlabel, ylabel;
  bool logx = true, logy = true;
  std::vector<PlotSeries> series;
  std::string yformat = "%.0e";  // gnuplot format of the y tick labels (e.g. "%g" for linear axes)
};

struct PlotFigure {
  std::string title;
  std::vector<PlotPanel> panels;
  int columns = 0;          // panels per row (0: all in one row up to 4, then wrap)
  int panel_width = 560;    // pixels per panel (the legend sits to the right of each)
  int panel_height = 340;
};

// The gnuplot script that draws `fig` to `out_path` with `terminal` ("svg" or "png").
std::string gnuplot_script(const PlotFigure& fig, const std::string& terminal, const std::string& out_path);

// Writes PATH_STEM.svg and PATH_STEM.png (the parent directory is created). Throws UserError when
// gnuplot is missing or fails (the message carries gnuplot's first error line).
void render_figure(const PlotFigure& fig, const std::string& path_stem);

// Whether the gnuplot program can be run.
bool gnuplot_available();
// UserError (file "command line", field `field`) when gnuplot is not installed: a command given
// a plot option calls it before it computes anything, so a missing gnuplot costs no run and
// leaves nothing written.
void require_gnuplot(const std::string& field);

}  // namespace scaleinv
