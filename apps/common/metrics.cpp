// JSON-lines metrics log and training-curve plots (gnuplot PNG or a hand-written SVG with a loss
// panel and an accuracy panel).
#include "apps/common/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace minidl::apps {

std::string rank_log_path(const std::string& path, int rank) {
  const size_t at = path.find("{rank}");
  if (at == std::string::npos) return rank == 0 ? path : std::string();
  std::string p = path;
  for (size_t pos = at; pos != std::string::npos; pos = p.find("{rank}", pos))
    p.replace(pos, 6, std::to_string(rank));
  return p;
}

JsonLinesLog::JsonLinesLog(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  MINIDL_CHECK(file_ != nullptr, "cannot open --log-json file '", path,
               "': ", std::strerror(errno));
}

JsonLinesLog::~JsonLinesLog() {
  if (file_) std::fclose(file_);
}

JsonLinesLog& JsonLinesLog::operator=(JsonLinesLog&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(o.file_, nullptr);
    path_ = std::move(o.path_);
  }
  return *this;
}

void JsonLinesLog::write(const nlohmann::json& record) {
  if (!file_) return;
  std::string line = record.dump() + "\n";
  bool ok =
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  MINIDL_CHECK(ok, "cannot write to --log-json file '", path_, "': ", std::strerror(errno));
}

namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool gnuplot_available() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

// A polyline through the points mapped into the box [x0,x0+w] x [y0,y0+h].
struct Panel {
  double x0, y0, w, h, xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * w; }
  double py(double y) const { return y0 + h - (y - ymin) / (ymax - ymin) * h; }
};

void range_of(const std::vector<double>& a, const std::vector<double>& b, double& lo, double& hi) {
  lo = INFINITY, hi = -INFINITY;
  for (const auto* v : {&a, &b})
    for (double x : *v)
      if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) hi = lo + 1;
}

void polyline(std::ostringstream& svg, const Panel& p, const std::vector<double>& xs,
              const std::vector<double>& ys, const char* color, bool dots) {
  const size_t n = std::min(xs.size(), ys.size());
  if (n == 0) return;
  svg << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
  for (size_t i = 0; i < n; ++i) svg << p.px(xs[i]) << ',' << p.py(ys[i]) << ' ';
  svg << "'/>\n";
  if (dots)
    for (size_t i = 0; i < n; ++i)
      svg << "<circle r='3' fill='" << color << "' cx='" << p.px(xs[i]) << "' cy='" << p.py(ys[i])
          << "'/>\n";
}

void axes(std::ostringstream& svg, const Panel& p, const std::string& ylabel) {
  svg << "<rect fill='none' stroke='#444' x='" << p.x0 << "' y='" << p.y0 << "' width='" << p.w
      << "' height='" << p.h << "'/>\n";
  for (int i = 0; i <= 4; ++i) {
    double y = p.ymin + (p.ymax - p.ymin) * i / 4, x = p.xmin + (p.xmax - p.xmin) * i / 4;
    svg << "<text font-size='11' text-anchor='end' x='" << p.x0 - 4 << "' y='" << p.py(y) + 4
        << "'>" << std::setprecision(3) << y << "</text>\n";
    svg << "<text font-size='11' text-anchor='middle' x='" << p.px(x) << "' y='" << p.y0 + p.h + 14
        << "'>" << std::setprecision(3) << x << "</text>\n";
  }
  svg << "<text font-size='12' x='" << p.x0 << "' y='" << p.y0 - 6 << "'>" << ylabel << "</text>\n";
}

std::string svg_plot(const TrainingCurves& c, const std::string& title) {
  std::ostringstream svg;
  const bool with_acc = !c.test_acc.empty();  // a second panel for the accuracy
  const int width = with_acc ? 900 : 450;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='380' "
      << "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << "<text font-size='15' x='" << width / 2 << "' y='22' text-anchor='middle'>" << title
      << "</text>\n";
  double xlo, xhi, lo, hi;
  range_of(c.train_x, c.epoch, xlo, xhi);
  xlo = std::min(xlo, 0.0);
  range_of(c.train_loss, c.test_loss, lo, hi);
  Panel loss{60, 50, 360, 280, xlo, xhi, std::min(lo, 0.0), hi};
  axes(svg, loss, "loss (blue: train, red: " + c.eval_label + ") vs " + c.x_label);
  polyline(svg, loss, c.train_x, c.train_loss, "#1f77b4", false);
  polyline(svg, loss, c.epoch, c.test_loss, "#d62728", true);
  if (!with_acc) {
    svg << "</svg>\n";
    return svg.str();
  }
  range_of(c.test_acc, c.test_acc, lo, hi);
  Panel acc{
      510, 50, 360, 280, xlo, xhi, std::floor(lo - 0.5), std::min(100.0, std::ceil(hi + 0.5))};
  axes(svg, acc, "test accuracy (%) vs epoch");
  polyline(svg, acc, c.epoch, c.test_acc, "#2ca02c", true);
  svg << "</svg>\n";
  return svg.str();
}

void gnuplot_png(const std::string& path, const TrainingCurves& c, const std::string& title) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("minidl-plot-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write_xy = [&](const std::string& name, const std::vector<double>& x,
                      const std::vector<double>& y) {
    std::ofstream f(dir / name);
    f << std::setprecision(8);
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) f << x[i] << ' ' << y[i] << '\n';
    if (x.empty()) f << "0 NaN\n";
  };
  write_xy("train.dat", c.train_x, c.train_loss);
  write_xy("test.dat", c.epoch, c.test_loss);
  write_xy("acc.dat", c.epoch, c.test_acc);
  std::string tmp_png = path + ".tmp.png";
  {
    std::ofstream gp(dir / "plot.gp");
    const bool with_acc = !c.test_acc.empty();
    gp << "set terminal pngcairo size " << (with_acc ? 1000 : 520)
       << ",420 noenhanced\nset output '" << tmp_png << "'\n"
       << "set multiplot layout 1," << (with_acc ? 2 : 1) << " title '" << title
       << "'\nset xlabel '" << c.x_label << "'\n"
       << "set ylabel 'loss'\nset grid\nplot '" << (dir / "train.dat").string()
       << "' with lines title 'train', '" << (dir / "test.dat").string()
       << "' with linespoints title '" << c.eval_label << "'\n";
    if (with_acc)
      gp << "set ylabel 'test accuracy (%)'\nplot '" << (dir / "acc.dat").string()
         << "' with linespoints title 'test acc'\n";
    gp << "unset multiplot\n";
  }
  std::string cmd = "gnuplot '" + (dir / "plot.gp").string() + "' 2>/dev/null";
  int rc = std::system(cmd.c_str());
  // pngcairo may be missing from some builds; the png terminal is the fallback.
  if (rc != 0) {
    std::string script = (dir / "plot.gp").string();
    std::system(("sed -i 's/pngcairo/png/' '" + script + "'").c_str());
    rc = std::system(cmd.c_str());
  }
  fs::remove_all(dir);
  MINIDL_CHECK(rc == 0 && fs::exists(tmp_png), "gnuplot failed to write the plot '", path, "'");
  fs::rename(tmp_png, path);
}

}  // namespace

std::string write_training_plot(const std::string& path, const TrainingCurves& curves,
                                const std::string& title) {
  if (has_suffix(path, ".svg")) {
    write_file_atomic(path, svg_plot(curves, title));
    return path;
  }
  MINIDL_CHECK(has_suffix(path, ".png"), "--plot '", path, "': use a .png or .svg file name");
  if (gnuplot_available()) {
    gnuplot_png(path, curves, title);
    return path;
  }
  std::string svg_path = path + ".svg";
  std::fprintf(stderr, "note: gnuplot not found (apt-get install gnuplot-nox); wrote %s\n",
               svg_path.c_str());
  write_file_atomic(svg_path, svg_plot(curves, title));
  return svg_path;
}

}  // namespace minidl::apps
