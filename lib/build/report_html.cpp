// `--report FILE.html`: the JSON report rendered as one static page. Everything is computed
// here (tables, SVG), so the page needs no scripts and no network.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "ptc/manifest.h"
#include "ptc/report.h"

namespace ptc {
namespace {

using json = nlohmann::ordered_json;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string str(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

std::string bytes_text(double b) {
  char buf[64];
  if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string num(double v, const char* fmt = "%.3f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}code{font:12px ui-monospace,monospace}.src{color:#555;font:12px ui-monospace,monospace}
.bar{background:#4a7bd0;height:12px}.k-loop{color:#2a7}.k-row_group{color:#a72}.k-gemm{color:#27a}.k-conv{color:#a27}
.none{color:#999}
)";

void stages(std::ostringstream& os, const json& r) {
  os << "<h2 id=\"stages\">Compile stages</h2>\n<table class=\"stages\"><tr><th>stage</th><th>seconds</th><th></th></tr>\n";
  double total = 0, most = 1e-9;
  for (const auto& [k, v] : r["compile_seconds"].items()) {
    total += v.get<double>();
    most = std::max(most, v.get<double>());
  }
  for (const auto& [k, v] : r["compile_seconds"].items())
    os << "<tr><td>" << esc(k) << "</td><td>" << num(v.get<double>()) << "</td><td><div class=\"bar\" style=\"width:"
       << num(300 * v.get<double>() / most, "%.0f") << "px\"></div></td></tr>\n";
  os << "<tr><th>total</th><th>" << num(total) << "</th><th></th></tr></table>\n";
  if (r.contains("cache") && r["cache"].value("hit", false))
    os << "<p>This compile was served from the compile cache in " << num(r["cache"]["seconds"].get<double>())
       << " s; the stage times are those of the compile that filled it.</p>\n";
}

void kernels(std::ostringstream& os, const json& r) {
  os << "<h2 id=\"kernels\">Kernels (" << r["kernels"].size() << ")</h2>\n"
     << "<table class=\"kernels\"><tr><th>#</th><th>kernel</th><th>kind</th><th>computes</th><th>graph nodes (user source)</th></tr>\n";
  int i = 0;
  for (const auto& k : r["kernels"]) {
    std::string kind = str(k["kind"]);
    os << "<tr id=\"kernel-" << i << "\" class=\"kernel\"><td>" << i << "</td><td><code>" << esc(str(k["name"]))
       << "</code></td><td class=\"k-" << esc(kind) << "\">" << esc(kind)
       << (k.contains("library") ? " (" + esc(str(k["library"])) + ")" : std::string()) << "</td><td>";
    for (const auto& c : k["computations"]) {
      os << "<code>" << esc(str(c["buffer"])) << "</code> " << esc(str(c["kind"]));
      if (c.contains("fused_as")) os << " (" << esc(str(c["fused_as"])) << ")";
      os << "<br>";
    }
    os << "</td><td>";
    for (const auto& n : k["nodes"]) {
      os << "<span class=\"node\"><a href=\"#node-" << esc(str(n["name"])) << "\"><code>" << esc(str(n["name"])) << "</code></a>";
      if (n.contains("op")) os << " " << esc(str(n["op"]));
      if (n.contains("source")) os << " <span class=\"src\">" << esc(str(n["source"])) << "</span>";
      os << "</span><br>";
    }
    os << "</td></tr>\n";
    ++i;
  }
  os << "</table>\n";
}

// Arena: each temporary as a box (kernels it lives across x its byte range), plus the bytes
// live at each kernel.
void arena(std::ostringstream& os, const json& r) {
  const json& a = r["arena"];
  size_t nk = std::max<size_t>(1, r["kernels"].size());
  double total = std::max(1.0, a["bytes_at_max_sizes"].get<double>());
  std::vector<double> live(nk, 0);
  for (const auto& b : a["buffers"])
    for (int k = b["first_kernel"].get<int>(); k <= b["last_kernel"].get<int>() && k < static_cast<int>(nk); ++k)
      live[std::max(0, k)] += b["bytes"].get<double>();
  double peak = *std::max_element(live.begin(), live.end());
  os << "<h2 id=\"arena\">Arena use over the run</h2>\n<p>" << bytes_text(total) << " at the symbols' largest sizes ("
     << bytes_text(a["bytes_without_reuse"].get<double>()) << " without reuse; peak live " << bytes_text(peak) << "; "
     << a["in_place_buffers"].get<int>() << " buffers written in place). x: kernels in run order; y: arena offset; "
     << "the line: bytes live at each kernel.</p>\n";
  const double W = 900, H = 300, L = 60;
  double xs = (W - L - 10) / static_cast<double>(nk), ys = (H - 30) / std::max(total, peak);
  os << "<svg class=\"arena\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" style=\"border:1px solid #ccc\">\n";
  int i = 0;
  for (const auto& b : a["buffers"]) {
    double x0 = L + b["first_kernel"].get<int>() * xs, x1 = L + (b["last_kernel"].get<int>() + 1) * xs;
    double y0 = H - 20 - (b["offset"].get<double>() + b["bytes"].get<double>()) * ys;
    double h = std::max(1.0, b["bytes"].get<double>() * ys);
    int hue = (i++ * 47) % 360;
    os << "<rect x=\"" << num(x0, "%.1f") << "\" y=\"" << num(y0, "%.1f") << "\" width=\"" << num(std::max(1.0, x1 - x0), "%.1f")
       << "\" height=\"" << num(h, "%.1f") << "\" fill=\"hsl(" << hue << ",55%,65%)\" stroke=\"#555\" stroke-width=\"0.3\"><title>"
       << esc(str(b["buffer"])) << ": " << bytes_text(b["bytes"].get<double>()) << ", kernels " << b["first_kernel"].get<int>()
       << "-" << b["last_kernel"].get<int>() << "</title></rect>\n";
  }
  os << "<polyline fill=\"none\" stroke=\"#c00\" stroke-width=\"1.5\" points=\"";
  for (size_t k = 0; k < nk; ++k)
    os << num(L + k * xs, "%.1f") << "," << num(H - 20 - live[k] * ys, "%.1f") << " " << num(L + (k + 1) * xs, "%.1f") << ","
       << num(H - 20 - live[k] * ys, "%.1f") << " ";
  os << "\"/>\n<line x1=\"" << L << "\" y1=\"" << H - 20 << "\" x2=\"" << W - 10 << "\" y2=\"" << H - 20 << "\" stroke=\"#000\"/>\n"
     << "<text x=\"" << L << "\" y=\"" << H - 5 << "\" font-size=\"11\">kernel 0</text><text x=\"" << W - 80 << "\" y=\"" << H - 5
     << "\" font-size=\"11\">kernel " << nk - 1 << "</text><text x=\"2\" y=\"14\" font-size=\"11\">" << bytes_text(std::max(total, peak))
     << "</text>\n</svg>\n";
}

void graph(std::ostringstream& os, const json& r) {
  if (!r.contains("graph")) return;
  os << "<h2 id=\"graph\">Graph (" << r["graph"].size() << " nodes after the graph passes)</h2>\n"
     << "<table class=\"graph\"><tr><th>node</th><th>op</th><th>inputs</th><th>outputs</th><th>kernels</th><th>user source</th></tr>\n";
  for (const auto& n : r["graph"]) {
    os << "<tr id=\"node-" << esc(str(n["name"])) << "\"><td><code>" << esc(str(n["name"])) << "</code></td><td>" << esc(str(n["op"]))
       << "</td><td><code>";
    bool first = true;
    for (const auto& v : n["inputs"]) {
      os << (first ? "" : ", ") << esc(str(v));
      first = false;
    }
    os << "</code></td><td><code>";
    for (const auto& o : n["outputs"]) os << esc(str(o["name"])) << ": " << esc(str(o["type"])) << "<br>";
    os << "</code></td><td>";
    if (n["kernels"].empty()) os << "<span class=\"none\">none (view, folded or unused)</span>";
    for (const auto& k : n["kernels"]) os << "<a href=\"#kernel-" << k.get<int>() << "\">#" << k.get<int>() << "</a> ";
    os << "</td><td class=\"src\">" << (n.contains("source") ? esc(str(n["source"])) : "") << "</td></tr>\n";
  }
  os << "</table>\n";
}

}  // namespace

std::string render_report_html(const json& r) {
  std::ostringstream os;
  std::string model = r.contains("model") ? str(r["model"]) : "model";
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ptc report: " << esc(model)
     << "</title>\n<style>" << kStyle << "</style></head><body>\n<h1>ptc report: " << esc(model) << "</h1>\n";
  os << "<table class=\"summary\">\n<tr><th>format</th><td>" << esc(str(r.value("format", json("")))) << "</td></tr>\n";
  if (r.contains("manifest")) {
    const json& m = r["manifest"];
    os << "<tr><th>ptc</th><td>" << esc(str(m["ptc_version"])) << "</td></tr>\n<tr><th>device / arch</th><td>" << esc(str(m["device"]))
       << " / " << esc(str(m["arch"])) << "</td></tr>\n<tr><th>model SHA-256</th><td><code>" << esc(str(m["model"]["sha256"]))
       << "</code></td></tr>\n<tr><th>inputs</th><td>";
    for (const auto& t : m["inputs"]) os << "<code>" << esc(manifest_tensor_text(t)) << "</code><br>";
    os << "</td></tr>\n<tr><th>outputs</th><td>";
    for (const auto& t : m["outputs"]) os << "<code>" << esc(manifest_tensor_text(t)) << "</code><br>";
    os << "</td></tr>\n";
  }
  if (r.contains("symbols") && !r["symbols"].empty()) os << "<tr><th>symbols</th><td><code>" << esc(r["symbols"].dump()) << "</code></td></tr>\n";
  os << "<tr><th>kernels</th><td>" << r["kernels"].size() << "</td></tr>\n<tr><th>weights</th><td>"
     << bytes_text(r["weights"]["bytes"].get<double>()) << " in " << r["weights"]["tensors"].get<int>() << " tensors</td></tr>\n</table>\n";
  os << "<p><a href=\"#stages\">compile stages</a> · <a href=\"#kernels\">kernels</a> · <a href=\"#arena\">arena</a> · <a href=\"#graph\">graph</a></p>\n";
  stages(os, r);
  kernels(os, r);
  arena(os, r);
  graph(os, r);
  os << "</body></html>\n";
  return os.str();
}

}  // namespace ptc
