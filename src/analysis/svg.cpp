// A small deterministic SVG writer (docs/analysis.md).
#include "analysis/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "util/error.h"

namespace lol::svg {
namespace {

std::string num(double x, int digits = 1) {
  if (!std::isfinite(x)) return "0";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, x);
  std::string s = buffer;
  return s == "-0.0" || s == "-0" ? s.substr(1) : s;
}

// An axis end as a person reads it: two decimals below 10,000 (shares, losses), three
// significant digits with k or M up to a billion (tokens: "34.8M"), and in powers of ten beyond.
std::string axis_number(double x) {
  if (!std::isfinite(x)) return "0";
  const double a = std::abs(x);
  if (a < 1e4) return num(x, 2);
  // The unit after rounding to three digits: 999,999 reads 1M, not 1e+03k.
  char buffer[32];
  if (a >= 999.5e6)
    std::snprintf(buffer, sizeof(buffer), "%.3g", x);
  else
    std::snprintf(buffer, sizeof(buffer), "%.3g%s", a >= 999.5e3 ? x / 1e6 : x / 1e3,
                  a >= 999.5e3 ? "M" : "k");
  return buffer;
}

std::string text(double x, double y, const std::string& content, const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (extra.empty() ? "" : " " + extra) +
         ">" + escape(content) + "</text>\n";
}

std::string rect(double x, double y, double w, double h, const std::string& fill,
                 const std::string& extra = "") {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
         num(h) + "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra) + "/>\n";
}

std::string open(double width, double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"11\">\n";
}

double label_width(const std::vector<std::string>& labels) {
  size_t longest = 0;
  for (const auto& l : labels) longest = std::max(longest, l.size());
  return 7.0 * static_cast<double>(longest) + 8;
}

}  // namespace

std::string escape(const std::string& in) {
  std::string out;
  for (char ch : in) switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  return out;
}

std::string colour(double t) {
  // Anchors of a light-to-dark blue scale (equal steps in t).
  static const int anchors[5][3] = {
      {247, 251, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}};
  t = std::isfinite(t) ? std::clamp(t, 0.0, 1.0) : 0.0;
  const double at = t * 4;
  const int i = std::min(3, static_cast<int>(at));
  const double f = at - i;
  char buffer[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c)
    rgb[c] = static_cast<int>(std::lround(anchors[i][c] + f * (anchors[i + 1][c] - anchors[i][c])));
  std::snprintf(buffer, sizeof(buffer), "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buffer;
}

std::string heatmap(const Heatmap& h) {
  LOL_CHECK(h.values.size() == h.rows.size(), "heatmap '", h.title, "': ", h.values.size(),
            " rows of values for ", h.rows.size(), " labels");
  for (const auto& row : h.values)
    LOL_CHECK(row.size() == h.columns.size(), "heatmap '", h.title, "': a row has ", row.size(),
              " values for ", h.columns.size(), " columns");
  // Cells as wide as the longest column label; the row title runs up the left edge.
  const double cell_h = h.digits >= 0 ? 40 : 22;
  const double cell = std::max(cell_h, label_width(h.columns) - 2);
  const double left = label_width(h.rows) + 24, top = 54;
  const double grid_w = cell * static_cast<double>(h.columns.size());
  const double grid_h = cell_h * static_cast<double>(h.rows.size());
  const double width = std::max(left + grid_w + 70, 7.5 * static_cast<double>(h.title.size()) + 10);
  const double height = top + std::max(grid_h, 60.0) + 16;
  const double span = h.max > h.min ? h.max - h.min : 1;
  std::string out = open(width, height);
  out += text(4, 16, h.title, "font-size=\"13\" font-weight=\"bold\"");
  out +=
      text(left + grid_w / 2, 34, h.column_title, "text-anchor=\"middle\" font-style=\"italic\"");
  const double mid = top + grid_h / 2;
  out += text(
      12, mid, h.row_title,
      "text-anchor=\"middle\" font-style=\"italic\" transform=\"rotate(-90 12 " + num(mid) + ")\"");
  for (size_t c = 0; c < h.columns.size(); ++c)
    out += text(left + cell * (static_cast<double>(c) + 0.5), top - 5, h.columns[c],
                "text-anchor=\"middle\"");
  for (size_t r = 0; r < h.rows.size(); ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    out += text(left - 6, y + cell_h / 2 + 4, h.rows[r], "text-anchor=\"end\"");
    for (size_t c = 0; c < h.columns.size(); ++c) {
      const double v = h.values[r][c], t = (v - h.min) / span;
      const double x = left + cell * static_cast<double>(c);
      out += rect(x, y, cell, cell_h, colour(t), "stroke=\"#ffffff\"");
      if (h.digits >= 0)
        out += text(x + cell / 2, y + cell_h / 2 + 4, num(v, h.digits),
                    std::string("text-anchor=\"middle\" fill=\"") +
                        (t > 0.55 ? "#ffffff" : "#000000") + "\"");
    }
  }
  // The colour scale: ten steps from min (bottom) to max (top).
  const double lx = left + grid_w + 12;
  const double lh = std::max(60.0, grid_h);
  for (int i = 0; i < 10; ++i)
    out += rect(lx, top + lh * (9 - i) / 10, 12, lh / 10 + 0.5, colour((i + 0.5) / 10));
  out += text(lx + 16, top + 8, num(h.max, 2));
  out += text(lx + 16, top + lh, num(h.min, 2));
  out += "</svg>\n";
  return out;
}

std::string bar_chart(const BarChart& b) {
  LOL_CHECK(b.labels.size() == b.values.size(), "bar chart '", b.title, "': ", b.values.size(),
            " values for ", b.labels.size(), " labels");
  double top_value = b.max;
  for (double v : b.values)
    if (b.max <= 0 && std::isfinite(v)) top_value = std::max(top_value, v);
  if (top_value <= 0) top_value = 1;
  const double bar = std::max(46.0, label_width(b.labels)), left = 50, top = 54, plot = 150;
  const double width = std::max({left + bar * static_cast<double>(b.values.size()) + 20,
                                 7.5 * static_cast<double>(b.title.size()) + 10,
                                 6.5 * static_cast<double>(b.y_title.size()) + 10});
  const double height = top + plot + 40;
  std::string out = open(width, height);
  out += text(4, 16, b.title, "font-size=\"13\" font-weight=\"bold\"");
  out += text(4, 32, b.y_title);
  out += "<line x1=\"" + num(left) + "\" y1=\"" + num(top + plot) + "\" x2=\"" + num(width - 10) +
         "\" y2=\"" + num(top + plot) + "\" stroke=\"#000000\"/>\n";
  out += text(left - 4, top + 4, num(top_value, b.digits), "text-anchor=\"end\"");
  out += text(left - 4, top + plot, "0", "text-anchor=\"end\"");
  for (size_t i = 0; i < b.values.size(); ++i) {
    const double v = std::isfinite(b.values[i]) ? std::clamp(b.values[i], 0.0, top_value) : 0;
    const double h = plot * v / top_value, x = left + bar * static_cast<double>(i);
    out += rect(x + 6, top + plot - h, bar - 12, h, colour(0.7));
    out += text(x + bar / 2, top + plot - h - 3, num(b.values[i], b.digits),
                "text-anchor=\"middle\" font-size=\"9\"");
    out += text(x + bar / 2, top + plot + 14, b.labels[i], "text-anchor=\"middle\"");
  }
  out += "</svg>\n";
  return out;
}

std::string scatter(const Scatter& s) {
  LOL_CHECK(s.x.size() == s.y.size() && s.x.size() == s.group.size(), "scatter '", s.title,
            "': x, y and group must have one entry per point");
  for (auto g : s.group)
    LOL_CHECK(g < s.groups.size(), "scatter '", s.title, "': group ", g, " has no name");
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  // Plotted x: log10 of the data on a log axis; points that cannot be drawn are left out.
  std::vector<double> xs(s.x.size());
  std::vector<bool> drawn(s.x.size());
  for (size_t i = 0; i < s.x.size(); ++i) {
    xs[i] = s.log_x ? (s.x[i] > 0 ? std::log10(s.x[i]) : NAN) : s.x[i];
    drawn[i] = std::isfinite(xs[i]) && std::isfinite(s.y[i]);
  }
  auto range = [&](const std::vector<double>& v) {
    double lo = 0, hi = 0;
    bool first = true;
    for (size_t i = 0; i < v.size(); ++i)
      if (drawn[i]) {
        lo = first ? v[i] : std::min(lo, v[i]);
        hi = first ? v[i] : std::max(hi, v[i]);
        first = false;
      }
    if (hi - lo < 1e-12) {
      lo -= 1;
      hi += 1;
    }
    const double pad = 0.05 * (hi - lo);
    return std::pair<double, double>{lo - pad, hi + pad};
  };
  // Plain variables, not structured bindings: C++17 lambdas cannot capture those (clang
  // refuses; the fuzz preset builds with clang-14).
  const std::pair<double, double> x_range = range(xs), y_range = range(s.y);
  const double x0 = x_range.first, x1 = x_range.second;
  const double y0 = y_range.first, y1 = y_range.second;
  auto x_label = [&](double x) { return axis_number(s.log_x ? std::pow(10.0, x) : x); };
  const double left = 50, top = 30, plot = 300;
  const double legend_x = left + plot + 16;
  const double width = std::max(legend_x + label_width(s.groups) + 30,
                                7.5 * static_cast<double>(s.title.size()) + 10);
  const double height = top + plot + 40;
  std::string out = open(width, height);
  out += text(4, 16, s.title, "font-size=\"13\" font-weight=\"bold\"");
  out += rect(left, top, plot, plot, "none", "stroke=\"#000000\"");
  out += text(left + plot / 2, top + plot + 30, s.x_title + (s.log_x ? " (log scale)" : ""),
              "text-anchor=\"middle\" font-style=\"italic\"");
  const double mid = top + plot / 2;
  out += text(
      14, mid, s.y_title,
      "text-anchor=\"middle\" font-style=\"italic\" transform=\"rotate(-90 14 " + num(mid) + ")\"");
  out += text(left, top + plot + 14, x_label(x0), "text-anchor=\"start\"");
  out += text(left + plot, top + plot + 14, x_label(x1), "text-anchor=\"end\"");
  out += text(left - 4, top + plot, axis_number(y0), "text-anchor=\"end\"");
  out += text(left - 4, top + 10, axis_number(y1), "text-anchor=\"end\"");
  // Light grid lines at the quarters of each axis, with their values.
  for (int q = 1; q <= 3; ++q) {
    const double f = q / 4.0, gx = left + plot * f, gy = top + plot * (1 - f);
    out += "<line x1=\"" + num(gx) + "\" y1=\"" + num(top) + "\" x2=\"" + num(gx) + "\" y2=\"" +
           num(top + plot) + "\" stroke=\"#e4e4e4\"/>\n";
    out += "<line x1=\"" + num(left) + "\" y1=\"" + num(gy) + "\" x2=\"" + num(left + plot) +
           "\" y2=\"" + num(gy) + "\" stroke=\"#e4e4e4\"/>\n";
    out += text(gx, top + plot + 14, x_label(x0 + f * (x1 - x0)), "text-anchor=\"middle\"");
    out += text(left - 4, gy + 4, axis_number(y0 + f * (y1 - y0)), "text-anchor=\"end\"");
  }
  auto px = [&](size_t i) { return left + plot * (xs[i] - x0) / (x1 - x0); };
  auto py = [&](size_t i) { return top + plot * (1 - (s.y[i] - y0) / (y1 - y0)); };
  if (s.lines)
    for (size_t g = 0; g < s.groups.size(); ++g) {
      std::string points;
      for (size_t i = 0; i < s.x.size(); ++i)
        if (drawn[i] && s.group[i] == g)
          points += (points.empty() ? "" : " ") + num(px(i)) + "," + num(py(i));
      if (!points.empty())
        out += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + palette[g % 10] +
               "\" stroke-width=\"1.5\"/>\n";
    }
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!drawn[i]) continue;
    out += "<circle cx=\"" + num(px(i)) + "\" cy=\"" + num(py(i)) + "\" r=\"3\" fill=\"" +
           palette[s.group[i] % 10] + "\" fill-opacity=\"0.6\"/>\n";
  }
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const double y = top + 10 + 16 * static_cast<double>(g);
    out += "<circle cx=\"" + num(legend_x + 5) + "\" cy=\"" + num(y - 4) + "\" r=\"4\" fill=\"" +
           palette[g % 10] + "\"/>\n";
    out += text(legend_x + 14, y, s.groups[g]);
  }
  out += "</svg>\n";
  return out;
}

std::string html_page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         escape(title) +
         "</title>\n<style>\nbody{font-family:sans-serif;max-width:1100px;margin:2em auto;"
         "padding:0 1em;color:#111}\nfigure{display:inline-block;vertical-align:top;margin:0.5em "
         "1em 1em 0}\nfigcaption{max-width:420px;font-size:0.85em;color:#333}\ntable{border-"
         "collapse:collapse;margin:0.5em 0 1em}\ntd,th{border:1px solid #bbb;padding:2px "
         "8px;text-align:right}\nth{background:#eef}\n</style>\n</head>\n<body>\n<h1>" +
         escape(title) + "</h1>\n" + body + "</body>\n</html>\n";
}

std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table>\n<tr>";
  for (const auto& h : header) out += "<th>" + escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const auto& cell : row) out += "<td>" + escape(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string html_figure(const std::string& picture, const std::string& caption) {
  return "<figure>\n" + picture + "<figcaption>" + caption + "</figcaption>\n</figure>\n";
}

}  // namespace lol::svg
