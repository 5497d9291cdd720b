// minidl-compare's chart: samples/s per mode as bars, and the projected speedup against N
// (log2 axis) per link with the measured point; gnuplot PNG, or a hand-written SVG.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "apps/compare/report.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace minidl::compare {

namespace {

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '\'')
      o += "&apos;";
    else
      o += c;
  }
  return o;
}

// The measured point on the speedup panel: N * T_1 / measured step.
double measured_speedup(const Report& r) {
  return double(r.measured_devices) * r.model.single_s / r.measured_step_s;
}

std::string svg_chart(const Report& rep) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  const bool proj = rep.has_model && !rep.projections.empty();
  const int width = proj ? 1040 : 520;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width
    << "' height='420' font-family='sans-serif'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n<text x='10' y='20' font-size='14'>"
    << xml_escape(rep.title) << "</text>\n";
  // Left: bars.
  const double x0 = 60, y0 = 50, w = 420, h = 300;
  double ymax = 0;
  for (const RunResult& r : rep.rows) ymax = std::max(ymax, r.samples_per_s());
  ymax = ymax > 0 ? ymax * 1.15 : 1;
  s << "<rect fill='none' stroke='#444' x='" << x0 << "' y='" << y0 << "' width='" << w
    << "' height='" << h << "'/>\n<text font-size='12' x='" << x0 << "' y='" << y0 - 6
    << "'>samples/s</text>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = ymax * i / 4, y = y0 + h - h * i / 4;
    s << "<text font-size='11' text-anchor='end' x='" << x0 - 4 << "' y='" << y + 4 << "'>"
      << std::setprecision(0) << v << std::setprecision(1) << "</text>\n";
  }
  const size_t n = std::max<size_t>(rep.rows.size(), 1);
  const double slot = w / double(n);
  for (size_t i = 0; i < rep.rows.size(); ++i) {
    const RunResult& r = rep.rows[i];
    const double bh = h * r.samples_per_s() / ymax, bx = x0 + slot * double(i) + slot * 0.15;
    s << "<rect class='bar' fill='" << kColors[i % 6] << "' x='" << bx << "' y='" << y0 + h - bh
      << "' width='" << slot * 0.7 << "' height='" << bh << "'/>\n";
    s << "<text font-size='11' text-anchor='middle' x='" << bx + slot * 0.35 << "' y='"
      << y0 + h - bh - 4 << "'>" << std::setprecision(2) << rep.speedup(r) << "x"
      << std::setprecision(1) << "</text>\n";
    s << "<text font-size='11' text-anchor='middle' x='" << bx + slot * 0.35 << "' y='"
      << y0 + h + 16 << "'>" << xml_escape(r.label) << "</text>\n";
  }
  if (proj) {
    // Right: speedup vs log2 N.
    const double px0 = 580, pw = 420;
    const int maxn = rep.projections[0].points.back().devices;
    const double lx = std::log2(double(maxn));
    double smax = 1;
    for (const auto& p : rep.projections)
      for (const auto& q : p.points) smax = std::max(smax, q.speedup);
    smax *= 1.1;
    auto X = [&](double nn) { return px0 + std::log2(nn) / lx * pw; };
    auto Y = [&](double sp) { return y0 + h - sp / smax * h; };
    s << "<rect fill='none' stroke='#444' x='" << px0 << "' y='" << y0 << "' width='" << pw
      << "' height='" << h << "'/>\n<text font-size='12' x='" << px0 << "' y='" << y0 - 6
      << "'>projected DDP speedup vs devices (dot: measured)</text>\n";
    for (const auto& q : rep.projections[0].points)
      s << "<text font-size='11' text-anchor='middle' x='" << X(q.devices) << "' y='" << y0 + h + 14
        << "'>" << q.devices << "</text>\n";
    for (int i = 0; i <= 4; ++i)
      s << "<text font-size='11' text-anchor='end' x='" << px0 - 4 << "' y='" << Y(smax * i / 4) + 4
        << "'>" << smax * i / 4 << "</text>\n";
    for (size_t k = 0; k < rep.projections.size(); ++k) {
      const auto& p = rep.projections[k];
      s << "<polyline fill='none' stroke='" << kColors[k % 6] << "' stroke-width='1.5' points='";
      for (const auto& q : p.points) s << X(q.devices) << ',' << Y(q.speedup) << ' ';
      s << "'/>\n<text font-size='11' fill='" << kColors[k % 6] << "' x='" << px0 + 8 << "' y='"
        << y0 + 16 + 14 * double(k) << "'>" << xml_escape(p.link.describe()) << "</text>\n";
    }
    s << "<circle r='4' fill='black' cx='" << X(rep.measured_devices) << "' cy='"
      << Y(measured_speedup(rep)) << "'/>\n";
  }
  s << "</svg>\n";
  return s.str();
}

void gnuplot_png(const std::string& path, const Report& rep) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("minidl-compare-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const bool proj = rep.has_model && !rep.projections.empty();
  {
    std::ofstream f(dir / "bars.dat");
    for (const RunResult& r : rep.rows) f << '"' << r.label << "\" " << r.samples_per_s() << '\n';
  }
  if (proj) {
    std::ofstream f(dir / "proj.dat");
    for (const auto& p : rep.projections) {
      for (const auto& q : p.points) f << q.devices << ' ' << q.speedup << '\n';
      f << "\n\n";  // one gnuplot index per link
    }
    std::ofstream m(dir / "measured.dat");
    m << rep.measured_devices << ' ' << measured_speedup(rep) << '\n';
  }
  const std::string tmp_png = path + ".tmp.png";
  {
    std::ofstream gp(dir / "plot.gp");
    gp << "set terminal pngcairo size " << (proj ? 1100 : 560) << ",440 noenhanced\n"
       << "set output '" << tmp_png << "'\nset multiplot layout 1," << (proj ? 2 : 1) << " title '"
       << rep.title << "'\nset style fill solid 0.8\nset boxwidth 0.6\n"
       << "set yrange [0:*]\nset ylabel 'samples/s'\nset grid ytics\nplot '"
       << (dir / "bars.dat").string() << "' using 0:2:xtic(1) with boxes notitle\n";
    if (proj) {
      gp << "set logscale x 2\nset xlabel 'devices'\nset ylabel 'projected DDP speedup'\n"
         << "set key top left\nplot ";
      for (size_t k = 0; k < rep.projections.size(); ++k)
        gp << "'" << (dir / "proj.dat").string() << "' index " << k << " with linespoints title '"
           << rep.projections[k].link.describe() << "', ";
      gp << "'" << (dir / "measured.dat").string()
         << "' with points pt 7 ps 1.5 lc rgb 'black' title 'measured'\n";
    }
    gp << "unset multiplot\n";
  }
  const std::string cmd = "gnuplot '" + (dir / "plot.gp").string() + "' 2>/dev/null";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {  // pngcairo missing: the png terminal
    rc = std::system(("sed -i 's/pngcairo/png/' '" + (dir / "plot.gp").string() + "'").c_str());
    rc = std::system(cmd.c_str());
  }
  fs::remove_all(dir);
  MINIDL_CHECK(rc == 0 && fs::exists(tmp_png), "gnuplot failed to write the plot '", path, "'");
  fs::rename(tmp_png, path);
}

}  // namespace

std::string write_compare_plot(const std::string& path, const Report& report) {
  if (has_suffix(path, ".svg")) {
    write_file_atomic(path, svg_chart(report));
    return path;
  }
  MINIDL_CHECK(has_suffix(path, ".png"), "--plot '", path, "': use a .png or .svg file name");
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    gnuplot_png(path, report);
    return path;
  }
  const std::string svg = path + ".svg";
  std::fprintf(stderr, "note: gnuplot not found (apt-get install gnuplot-nox); wrote %s\n",
               svg.c_str());
  write_file_atomic(svg, svg_chart(report));
  return svg;
}

}  // namespace minidl::compare
