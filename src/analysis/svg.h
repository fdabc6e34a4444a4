#pragma once
// A small SVG writer for the analysis report (docs/analysis.md): heatmaps with a colour scale
// and bar charts, every number printed with fixed precision so the same data gives the same
// bytes (testable, diffable). Text is XML-escaped; nothing refers to outside resources.
#include <string>
#include <vector>

namespace lol::svg {

// "<", "&", ">", quotes escaped for XML text and attributes.
std::string escape(const std::string& text);

// The sequential colour scale (light to dark blue) at t in [0, 1], as "#rrggbb".
std::string colour(double t);

struct Heatmap {
  std::string title, row_title, column_title;
  std::vector<std::string> rows, columns;   // labels
  std::vector<std::vector<double>> values;  // [row][column]
  double min = 0, max = 1;                  // the colour scale's range
  int digits = 2;                           // cell text precision; < 0: no text in the cells
};
std::string heatmap(const Heatmap& h);

struct BarChart {
  std::string title, y_title;
  std::vector<std::string> labels;
  std::vector<double> values;
  double max = 0;  // y axis top; 0: the largest value
  int digits = 3;
};
std::string bar_chart(const BarChart& b);

// Points coloured by group, with a legend. Axes span the data.
struct Scatter {
  std::string title, x_title, y_title;
  std::vector<double> x, y;
  std::vector<size_t> group;        // per point, an index into groups
  std::vector<std::string> groups;  // legend names (up to 10 distinct colours, then repeated)
  bool lines = false;               // join each group's points in the order given (curves)
  bool log_x = false;               // logarithmic x axis (points with x <= 0 are left out)
};
std::string scatter(const Scatter& s);

// Pieces of a self-contained HTML page (the analysis report, lol compare).
std::string html_page(const std::string& title, const std::string& body);
std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows);
// A figure with its caption: the picture, then the numbers it shows.
std::string html_figure(const std::string& picture, const std::string& caption);

}  // namespace lol::svg
