// The campaign report (campaign/campaign.h): one set of tables, drawn as Markdown or as a
// self-contained HTML page. The page adds inline SVG line charts of the samples; it has no
// scripts and loads nothing, so it can be archived or mailed as a single file.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "campaign/campaign.h"
#include "generate/events.h"
#include "support/text.h"

namespace kvfuzz {

namespace {

// A table both renderers draw. Cells are plain text; each renderer escapes them.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

constexpr int kUnreachedStatesListed = 20;  // the rest are "and N more"
constexpr int kProgressRows = 10;           // one row per tenth of the elapsed time

// --- Numbers and durations ------------------------------------------------------------------

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// "1,234,567": executions run into the billions.
std::string grouped(int64_t value) {
  // The magnitude as unsigned, so that INT64_MIN has one too.
  const uint64_t magnitude =
      value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

// "45.2 s", "3m 05s", "2h 03m 04s".
std::string duration_text(double seconds) {
  if (!(seconds >= 0)) seconds = 0;   // NaN included
  seconds = std::min(seconds, 1e12);  // keeps the cast below defined
  if (seconds < 60) return fixed(seconds, 1) + " s";
  const auto total = static_cast<long long>(seconds + 0.5);
  char text[64];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%lldh %02lldm %02llds", total / 3600, total / 60 % 60,
                  total % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldm %02llds", total / 60, total % 60);
  }
  return text;
}

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

std::string joined(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

// --- Facts derived from the record ---------------------------------------------------------

int events_reached(const CampaignRecord& record) {
  return static_cast<int>(std::count_if(record.event_hits.begin(), record.event_hits.end(),
                                        [](int64_t hits) { return hits > 0; }));
}

// A hand-built record may hold fewer than kCacheStateCount flags; the missing ones count
// as not reached.
bool cache_state_reached(const CampaignRecord& record, int index) {
  return static_cast<size_t>(index) < record.cache_states.size() &&
         record.cache_states[static_cast<size_t>(index)];
}

int cache_states_reached(const CampaignRecord& record) {
  int reached = 0;
  for (int i = 0; i < kCacheStateCount; ++i) reached += cache_state_reached(record, i) ? 1 : 0;
  return reached;
}

std::string unreached_states_text(const CampaignRecord& record) {
  std::vector<std::string> names;
  int unlisted = 0;
  for (int i = 0; i < kCacheStateCount; ++i) {
    if (cache_state_reached(record, i)) continue;
    if (static_cast<int>(names.size()) < kUnreachedStatesListed) {
      names.push_back(cache_state_name(i));
    } else {
      ++unlisted;
    }
  }
  if (names.empty()) return "none";
  std::string text = joined(names, ", ");
  if (unlisted > 0) text += " and " + std::to_string(unlisted) + " more";
  return text;
}

size_t distinct_signatures(const CampaignRecord& record) {
  std::set<std::string> signatures;
  for (const CampaignFinding& finding : record.findings) signatures.insert(finding.signature);
  return signatures.size();
}

std::string findings_sentence(const CampaignRecord& record) {
  if (record.findings.empty()) return "No findings.";
  const size_t artifacts = record.findings.size();
  const size_t signatures = distinct_signatures(record);
  return std::to_string(artifacts) + (artifacts == 1 ? " artifact, " : " artifacts, ") +
         std::to_string(signatures) +
         (signatures == 1 ? " distinct signature." : " distinct signatures.");
}

std::string reached_sentence(const CampaignRecord& record) {
  return "Events reached: " + std::to_string(events_reached(record)) + " of " +
         std::to_string(kEventCount) +
         ". Cache states reached: " + std::to_string(cache_states_reached(record)) + " of " +
         std::to_string(kCacheStateCount) + ".";
}

// The samples closest before each tenth of the elapsed time (samples are in time order),
// without repeats; the last sample always ends the list.
std::vector<const CampaignSample*> tenth_samples(const std::vector<CampaignSample>& samples) {
  std::vector<const CampaignSample*> chosen;
  if (samples.empty()) return chosen;
  const double start = samples.front().elapsed_seconds;
  const double span = samples.back().elapsed_seconds - start;
  size_t next = 0;
  for (int tenth = 1; tenth <= kProgressRows; ++tenth) {
    const double until = start + span * tenth / kProgressRows;
    while (next + 1 < samples.size() && samples[next + 1].elapsed_seconds <= until) ++next;
    if (chosen.empty() || chosen.back() != &samples[next]) chosen.push_back(&samples[next]);
  }
  if (chosen.back() != &samples.back()) chosen.push_back(&samples.back());
  return chosen;
}

// --- Tables --------------------------------------------------------------------------------

Table settings_table(const CampaignRecord& record) {
  Table table{{"Setting", "Value"}, {}};
  table.rows = {
      {"Engine", record.engine},
      {"Targets", record.targets.empty() ? "-" : joined(record.targets, ", ")},
      {"Budget", duration_text(record.budget_seconds)},
      {"Elapsed", duration_text(record.elapsed_seconds)},
      {"Jobs", std::to_string(record.jobs)},
      {"Event counters", record.event_counters ? "on" : "off"},
      {"Command", record.command},
      {"Started", record.started},
      {"Machine", record.machine},
      {"Executions", grouped(record.executions)},
      {"Finished", record.finished ? "yes" : "no (running, or stopped before the final merge)"},
  };
  return table;
}

std::string tokens_text(const CampaignFinding& finding) {
  if (finding.fixture.empty()) return "-";
  return std::to_string(finding.tokens_before) + " \u2192 " + std::to_string(finding.tokens_after);
}

std::string filed_text(const CampaignFinding& finding) {
  if (!finding.filed.empty()) return finding.filed;
  if (!finding.duplicate_of.empty()) return "duplicate of " + finding.duplicate_of;
  return "-";
}

// One row per signature: its first finding (the one that was shrunk and filed) and how
// many artifacts had that signature; the record keeps every artifact.
Table findings_table(const CampaignRecord& record) {
  Table table{
      {"Signature", "Artifacts", "Kind", "Target", "Tokens", "Fixture", "Filed", "Failure", "Note"},
      {}};
  std::vector<std::string> order;
  std::map<std::string, std::pair<const CampaignFinding*, int>> by_signature;
  for (const CampaignFinding& finding : record.findings) {
    auto [it, first] = by_signature.try_emplace(finding.signature, &finding, 0);
    if (first) order.push_back(finding.signature);
    ++it->second.second;
  }
  for (const std::string& signature : order) {
    const auto& [finding, count] = by_signature.at(signature);
    table.rows.push_back({finding->signature, std::to_string(count), finding->kind, finding->target,
                          tokens_text(*finding), finding->fixture.empty() ? "-" : finding->fixture,
                          filed_text(*finding), finding->failure, finding->note});
  }
  return table;
}

// --- Reproducing a finding ----------------------------------------------------------------

// The folders a campaign writes its fixtures into, under its --out directory, beside the
// report (campaign_loop.h, CampaignPaths).
constexpr std::string_view kFixtureFolders[] = {"findings", "shrunk", "artifacts"};
constexpr int kFixtureFolderDepth = 3;  // findings/raw/NAME.json, artifacts/TARGET/NAME

// Where the report links a fixture: relative to the report (OUT/report.html) when the
// fixture lies in one of OUT's folders, so that the links survive moving or archiving OUT;
// any other path as it was recorded.
std::string fixture_href(const std::string& fixture) {
  const std::vector<std::string> parts = [&fixture] {
    std::vector<std::string> out;
    for (const auto& part : std::filesystem::path(fixture)) out.push_back(part.string());
    return out;
  }();
  const size_t from = parts.size() > kFixtureFolderDepth ? parts.size() - kFixtureFolderDepth : 0;
  for (size_t i = parts.size(); i-- > from;) {
    if (i + 1 == parts.size()) continue;  // the file itself
    const bool folder = std::find(std::begin(kFixtureFolders), std::end(kFixtureFolders),
                                  parts[i]) != std::end(kFixtureFolders);
    if (!folder) continue;
    std::string href;
    for (size_t j = i; j < parts.size(); ++j) href += (j > i ? "/" : "") + parts[j];
    return href;
  }
  return fixture;
}

// The commands that reproduce a finding: replay and explain its fixture on the campaign's
// engine. A parser input (fuzz_fixture) fails before any engine is made, so replay alone,
// without one, reproduces it.
std::vector<std::string> reproduce_commands(const CampaignRecord& record,
                                            const CampaignFinding& finding) {
  const std::string fixture = shell_word(finding.fixture);
  if (finding.target == "fuzz_fixture") return {"kvfuzz replay " + fixture};
  const std::string engine = " --engine " + shell_word(record.engine);
  return {"kvfuzz replay " + fixture + engine, "kvfuzz explain " + fixture + engine};
}

Table events_table(const CampaignRecord& record) {
  Table table{{"Event", "Hits", "Reached"}, {}};
  for (int e = 0; e < kEventCount; ++e) {
    const int64_t hits = record.event_hits[static_cast<size_t>(e)];
    table.rows.push_back(
        {std::string(event_name(static_cast<Event>(e))), grouped(hits), yes_no(hits > 0)});
  }
  return table;
}

Table corpus_table(const CampaignRecord& record) {
  Table table{{"Target", "Inputs before", "Inputs after"}, {}};
  for (const CampaignCorpus& corpus : record.corpora) {
    // 0 after means "not merged yet" (campaign.h), unless the campaign finished.
    const bool merged = corpus.inputs_after > 0 || record.finished;
    table.rows.push_back({corpus.target, grouped(corpus.inputs_before),
                          merged ? grouped(corpus.inputs_after) : "not merged yet"});
  }
  return table;
}

Table progress_table(const CampaignRecord& record) {
  Table table{{"Elapsed", "Target", "Exec/s", "Cov", "Features", "Events", "States", "Failures"},
              {}};
  for (const CampaignSample* sample : tenth_samples(record.samples)) {
    table.rows.push_back({duration_text(sample->elapsed_seconds), sample->target,
                          fixed(sample->executions_per_second, 0), grouped(sample->coverage),
                          grouped(sample->features), std::to_string(sample->events_reached),
                          std::to_string(sample->cache_states), std::to_string(sample->failures)});
  }
  return table;
}

// --- Markdown ------------------------------------------------------------------------------

// Keeps a cell one table cell: no line breaks, no column separators, no raw HTML.
std::string markdown_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string markdown_row(const std::vector<std::string>& cells) {
  std::string line = "|";
  // Appended piece by piece, not " " + text: g++ 12 -O3 reports a -Wrestrict false
  // positive on a literal + std::string&& (GCC PR 105329).
  for (const std::string& cell : cells) {
    line += ' ';
    line += markdown_text(cell);
    line += " |";
  }
  return line + "\n";
}

std::string markdown_table(const Table& table) {
  std::string out = markdown_row(table.header);
  out += "|";
  for (size_t i = 0; i < table.header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : table.rows) out += markdown_row(row);
  return out + "\n";
}

// --- HTML ----------------------------------------------------------------------------------

std::string html_table(const Table& table) {
  std::string out = "<table>\n<tr>";
  for (const std::string& cell : table.header) out += "<th>" + markup_text(cell) + "</th>";
  out += "</tr>\n";
  for (const auto& row : table.rows) {
    out += "<tr>";
    for (const std::string& cell : row) out += "<td>" + markup_text(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string html_paragraph(std::string_view text) {
  return "<p>" + markup_text(text) + "</p>\n";
}

// --- SVG line charts -----------------------------------------------------------------------

struct Point {
  double x = 0;
  double y = 0;
};

struct Series {
  std::string label;
  std::string colour;
  bool dashed = false;
  std::vector<Point> points;
};

struct Chart {
  std::string title;
  std::string y_title;
  std::optional<double> y_max;  // a fixed top, e.g. 100 for percentages
  std::vector<Series> series;
  // A logarithmic y axis: for rates that differ by orders of magnitude between series.
  bool log_y = false;
};

// Chart geometry in SVG user units.
constexpr double kChartWidth = 760;
constexpr double kPlotLeft = 80;
constexpr double kPlotRight = 20;
constexpr double kPlotTop = 30;
constexpr double kPlotHeight = 220;
constexpr double kBelowPlot = 50;  // x tick labels and the x axis title
constexpr double kLegendRow = 18;
constexpr double kPlotWidth = kChartWidth - kPlotLeft - kPlotRight;
constexpr size_t kMaxPlottedPoints = 800;  // per series: days of samples stay a small page

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string palette_colour(size_t index) {
  return kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
}

// Every n-th point and the last: the line keeps its shape, the page its size.
std::vector<Point> thinned(const std::vector<Point>& points) {
  if (points.size() <= kMaxPlottedPoints) return points;
  const size_t step = (points.size() + kMaxPlottedPoints - 1) / kMaxPlottedPoints;
  std::vector<Point> out;
  for (size_t i = 0; i < points.size(); i += step) out.push_back(points[i]);
  if (out.back().x != points.back().x || out.back().y != points.back().y) {
    out.push_back(points.back());
  }
  return out;
}

// One labelled tick on an axis, at a data value (on a log axis, the value's log10).
struct Tick {
  double at = 0;
  std::string label;
};

// The data ranges the axes span, in plotted units (log10 of the value on a log axis), and
// their ticks. Never empty, so the scaling below never divides by zero.
struct Bounds {
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  std::vector<Tick> x_ticks, y_ticks;
  // Log axis: where values <= 0 are drawn (the bottom), in plotted units.
  std::optional<double> y_floor;
};

constexpr int kTargetTicks = 5;  // about this many intervals per axis

// 1, 2 or 5 times a power of ten, so that `span` holds about kTargetTicks of it.
double nice_step(double span) {
  const double raw = span / kTargetTicks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalised = raw / magnitude;
  const double factor = normalised <= 1 ? 1 : normalised <= 2 ? 2 : normalised <= 5 ? 5 : 10;
  return factor * magnitude;
}

// A tick value with as many decimals as the step needs ("0.25", "1,000").
std::string tick_label(double value, double step) {
  if (step >= 1 && std::abs(value) < 1e15) return grouped(std::llround(value));
  const int digits = std::clamp(static_cast<int>(-std::floor(std::log10(step))), 0, 12);
  return fixed(value, digits);
}

std::vector<Tick> linear_ticks(double lo, double hi, double step,
                               const std::function<std::string(double)>& label) {
  std::vector<Tick> ticks;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; i <= 4 * kTargetTicks; ++i) {
    const double at = first + i * step;
    if (at > hi + step * 1e-9) break;
    ticks.push_back({at, label(at)});
  }
  return ticks;
}

// Steps of elapsed time a reader counts in: seconds, minutes, hours, days.
double time_step(double span) {
  constexpr double kSteps[] = {1,     2,     5,      10,     15,     30,      60,      120,
                               300,   600,   900,    1800,   3600,   7200,    10800,   21600,
                               43200, 86400, 172800, 432000, 864000, 2592000, 8640000, 31536000};
  if (span < kTargetTicks) return nice_step(span);
  for (const double step : kSteps) {
    if (span / step <= kTargetTicks + 1) return step;
  }
  return nice_step(span);
}

std::string time_label(double seconds, double step) {
  if (step < 1) return fixed(seconds, static_cast<int>(std::ceil(-std::log10(step)))) + " s";
  if (seconds < 60) return fixed(seconds, 0) + " s";
  return duration_text(seconds);
}

Bounds chart_bounds(const Chart& chart) {
  bool any = false;
  Bounds b;
  double y_top = 0;
  double smallest_positive = 0;
  for (const Series& series : chart.series) {
    for (const Point& p : series.points) {
      b.x_min = any ? std::min(b.x_min, p.x) : p.x;
      b.x_max = any ? std::max(b.x_max, p.x) : p.x;
      b.y_min = std::min(b.y_min, p.y);  // counts start at 0, the axis too
      y_top = std::max(y_top, p.y);
      if (p.y > 0 && (smallest_positive == 0 || p.y < smallest_positive)) smallest_positive = p.y;
      any = true;
    }
  }
  if (b.x_max <= b.x_min) b.x_max = b.x_min + 1;
  const double x_step = time_step(b.x_max - b.x_min);
  b.x_ticks = linear_ticks(b.x_min, b.x_max, x_step,
                           [x_step](double at) { return time_label(at, x_step); });
  if (chart.log_y && smallest_positive > 0) {
    // Whole decades from below the smallest positive value to above the largest.
    b.y_min = std::floor(std::log10(smallest_positive));
    b.y_max = std::max(std::ceil(std::log10(y_top)), b.y_min + 1);
    b.y_floor = b.y_min;
    const double decades = b.y_max - b.y_min;
    const double every = std::ceil(decades / (2 * kTargetTicks));  // at most ~10 labels
    b.y_ticks = linear_ticks(b.y_min, b.y_max, every, [](double at) {
      return tick_label(std::pow(10.0, at), std::min(1.0, std::pow(10.0, at)));
    });
    return b;
  }
  b.y_max = chart.y_max.value_or(y_top);
  if (b.y_max <= b.y_min) b.y_max = b.y_min + 1;
  const double y_step = nice_step(b.y_max - b.y_min);
  // A free top rises to the next tick, so that the highest line is below a labelled value.
  if (!chart.y_max) b.y_max = std::ceil(b.y_max / y_step - 1e-9) * y_step;
  b.y_ticks = linear_ticks(b.y_min, b.y_max, y_step,
                           [y_step](double at) { return tick_label(at, y_step); });
  return b;
}

double to_svg_x(const Bounds& b, double x) {
  return kPlotLeft + (x - b.x_min) / (b.x_max - b.x_min) * kPlotWidth;
}

// A data value's height; on a log axis its log10, values <= 0 at the floor.
double to_svg_y(const Bounds& b, double y) {
  if (b.y_floor) y = y > 0 ? std::max(std::log10(y), *b.y_floor) : *b.y_floor;
  return kPlotTop + kPlotHeight - (y - b.y_min) / (b.y_max - b.y_min) * kPlotHeight;
}

std::string svg_text(double x, double y, std::string_view anchor, std::string_view text,
                     std::string_view extra = {}) {
  return "<text x=\"" + fixed(x, 1) + "\" y=\"" + fixed(y, 1) + "\" text-anchor=\"" +
         std::string(anchor) + "\"" + std::string(extra) + ">" + markup_text(text) + "</text>\n";
}

std::string svg_line(double x1, double y1, double x2, double y2, std::string_view attributes) {
  return "<line x1=\"" + fixed(x1, 1) + "\" y1=\"" + fixed(y1, 1) + "\" x2=\"" + fixed(x2, 1) +
         "\" y2=\"" + fixed(y2, 1) + "\" " + std::string(attributes) + "/>\n";
}

// Plotted y of a tick (to_svg_y takes data values; a log tick is already a log10).
double tick_svg_y(const Bounds& b, double at) {
  return kPlotTop + kPlotHeight - (at - b.y_min) / (b.y_max - b.y_min) * kPlotHeight;
}

// Axes with a labelled tick and a faint grid line at every tick, and their titles.
std::string svg_axes(const Chart& chart, const Bounds& b) {
  const double bottom = kPlotTop + kPlotHeight;
  const double right = kPlotLeft + kPlotWidth;
  std::string out;
  for (const Tick& tick : b.y_ticks) {
    const double y = tick_svg_y(b, tick.at);
    out += svg_line(kPlotLeft, y, right, y, "class=\"grid\"");
    out += svg_line(kPlotLeft - 4, y, kPlotLeft, y, "class=\"axis\"");
    out += svg_text(kPlotLeft - 6, y + 4, "end", tick.label, " class=\"tick\"");
  }
  for (const Tick& tick : b.x_ticks) {
    const double x = to_svg_x(b, tick.at);
    out += svg_line(x, kPlotTop, x, bottom, "class=\"grid\"");
    out += svg_line(x, bottom, x, bottom + 4, "class=\"axis\"");
    out += svg_text(x, bottom + 16, "middle", tick.label, " class=\"tick\"");
  }
  out += svg_line(kPlotLeft, bottom, right, bottom, "class=\"axis\"");
  out += svg_line(kPlotLeft, kPlotTop, kPlotLeft, bottom, "class=\"axis\"");
  out += svg_text(kPlotLeft + kPlotWidth / 2, bottom + 36, "middle", "elapsed time");
  const double y_middle = kPlotTop + kPlotHeight / 2;
  const std::string y_title =
      b.y_floor ? chart.y_title + " (log scale; 0 at the bottom)" : chart.y_title;
  out += svg_text(16, y_middle, "middle", y_title,
                  " transform=\"rotate(-90 16 " + fixed(y_middle, 1) + ")\"");
  return out;
}

std::string svg_series(const Series& series, const Bounds& b) {
  const std::vector<Point> points = thinned(series.points);
  if (points.empty()) return "";
  const std::string stroke =
      "stroke=\"" + series.colour + "\"" + (series.dashed ? " stroke-dasharray=\"5 3\"" : "");
  if (points.size() == 1) {  // a polyline of one point draws nothing
    return "<circle cx=\"" + fixed(to_svg_x(b, points[0].x), 1) + "\" cy=\"" +
           fixed(to_svg_y(b, points[0].y), 1) + "\" r=\"3\" fill=\"" + series.colour + "\"/>\n";
  }
  std::string coordinates;
  for (const Point& p : points) {
    if (!coordinates.empty()) coordinates += ' ';
    coordinates += fixed(to_svg_x(b, p.x), 1) + "," + fixed(to_svg_y(b, p.y), 1);
  }
  return "<polyline class=\"series\" fill=\"none\" " + stroke + " points=\"" + coordinates +
         "\"/>\n";
}

std::string svg_legend(const Chart& chart) {
  std::string out;
  double y = kPlotTop + kPlotHeight + kBelowPlot + kLegendRow / 2;
  for (const Series& series : chart.series) {
    const std::string stroke = "stroke=\"" + series.colour + "\" stroke-width=\"2\"" +
                               (series.dashed ? " stroke-dasharray=\"5 3\"" : "");
    out += svg_line(kPlotLeft, y - 4, kPlotLeft + 24, y - 4, stroke);
    out += svg_text(kPlotLeft + 30, y, "start", series.label);
    y += kLegendRow;
  }
  return out;
}

std::string svg_chart(const Chart& chart) {
  const Bounds bounds = chart_bounds(chart);
  const double height = kPlotTop + kPlotHeight + kBelowPlot +
                        kLegendRow * static_cast<double>(chart.series.size()) + 6;
  std::string out = "<svg width=\"" + fixed(kChartWidth, 0) + "\" height=\"" + fixed(height, 0) +
                    "\" viewBox=\"0 0 " + fixed(kChartWidth, 0) + " " + fixed(height, 0) +
                    "\" role=\"img\" aria-label=\"" + markup_text(chart.title) + "\">\n";
  out += svg_text(kPlotLeft, 18, "start", chart.title, " class=\"chart-title\"");
  out += svg_axes(chart, bounds);
  for (const Series& series : chart.series) out += svg_series(series, bounds);
  out += svg_legend(chart);
  return out + "</svg>\n";
}

// --- The charts of a campaign --------------------------------------------------------------

using SampleValue = std::function<double(const CampaignSample&)>;

// The campaign's targets, then any target that only the samples name.
std::vector<std::string> plotted_targets(const CampaignRecord& record) {
  std::vector<std::string> targets = record.targets;
  for (const CampaignSample& sample : record.samples) {
    if (std::find(targets.begin(), targets.end(), sample.target) == targets.end()) {
      targets.push_back(sample.target);
    }
  }
  return targets;
}

// `target` empty: every sample (counters of the whole campaign).
Series sample_series(const CampaignRecord& record, const std::string& target,
                     const SampleValue& value) {
  Series series;
  for (const CampaignSample& sample : record.samples) {
    if (target.empty() || sample.target == target) {
      series.points.push_back({sample.elapsed_seconds, value(sample)});
    }
  }
  return series;
}

// Coverage and executions per second belong to the target that was running, so each
// target gets its own line (its colour in every chart) rather than one sawtooth line.
std::vector<Series> per_target_series(const CampaignRecord& record, std::string_view suffix,
                                      bool dashed, const SampleValue& value) {
  std::vector<Series> all;
  const std::vector<std::string> targets = plotted_targets(record);
  for (size_t i = 0; i < targets.size(); ++i) {
    Series series = sample_series(record, targets[i], value);
    if (series.points.empty()) continue;
    series.label = targets[i] + std::string(suffix);
    series.colour = palette_colour(i);
    series.dashed = dashed;
    all.push_back(std::move(series));
  }
  return all;
}

Series campaign_series(const CampaignRecord& record, std::string label, size_t colour,
                       const SampleValue& value) {
  Series series = sample_series(record, "", value);
  series.label = std::move(label);
  series.colour = palette_colour(colour);
  return series;
}

Chart coverage_chart(const CampaignRecord& record) {
  Chart chart{"Coverage and features", "edges (cov) / features (ft)", std::nullopt, {}};
  chart.series = per_target_series(record, " cov", false, [](const CampaignSample& s) {
    return static_cast<double>(s.coverage);
  });
  for (Series& features : per_target_series(record, " ft", true, [](const CampaignSample& s) {
         return static_cast<double>(s.features);
       })) {
    chart.series.push_back(std::move(features));
  }
  return chart;
}

// Percentages, so 11 events and 193 cache states share one axis.
Chart reached_chart(const CampaignRecord& record) {
  Chart chart{"Cache-state events reached", "% reached", 100.0, {}};
  chart.series.push_back(campaign_series(
      record, "events (of " + std::to_string(kEventCount) + ")", 0,
      [](const CampaignSample& s) { return 100.0 * s.events_reached / kEventCount; }));
  chart.series.push_back(campaign_series(
      record, "cache states (of " + std::to_string(kCacheStateCount) + ")", 1,
      [](const CampaignSample& s) { return 100.0 * s.cache_states / kCacheStateCount; }));
  return chart;
}

Chart speed_chart(const CampaignRecord& record) {
  // Log scale: targets differ by orders of magnitude (a model target runs at tens per
  // second, the parser at tens of thousands), and on a linear axis the slow ones lie flat
  // on zero.
  Chart chart{"Executions per second", "exec/s", std::nullopt, {}, true};
  chart.series = per_target_series(record, "", false,
                                   [](const CampaignSample& s) { return s.executions_per_second; });
  return chart;
}

Chart failures_chart(const CampaignRecord& record) {
  Chart chart{"Failures", "artifacts", std::nullopt, {}};
  chart.series.push_back(
      campaign_series(record, "artifacts so far", 1,
                      [](const CampaignSample& s) { return static_cast<double>(s.failures); }));
  return chart;
}

// --- Pages ---------------------------------------------------------------------------------

constexpr std::string_view kStyle = R"(body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
svg { display: block; margin: 0.5em 0 1.5em; font-size: 12px; }
svg .axis { stroke: #444; }
svg .grid { stroke: #e4e4e4; }
svg .tick { fill: #444; }
svg .series { fill: none; stroke-width: 1.5; }
svg .chart-title { font-weight: bold; font-size: 14px; }
)";

std::string title_text(const CampaignRecord& record) {
  return "kvfuzz campaign: " + record.engine;
}

// Code in Markdown: one line, fenced by more backticks than it holds in a row.
std::string markdown_code(std::string_view text) {
  std::string line;
  for (char c : text) line += c == '\n' || c == '\r' ? ' ' : c;
  const std::string fence = line.find('`') == std::string::npos ? "`" : "`` ";
  return fence + line + (fence == "`" ? "`" : " ``");
}

// Every artifact with a fixture: where it is, and the commands that reproduce it.
std::string markdown_reproduce(const CampaignRecord& record) {
  std::string out;
  for (const CampaignFinding& finding : record.findings) {
    if (finding.fixture.empty()) continue;
    out += "* " + markdown_text(finding.signature) + " (" + markdown_text(finding.artifact) +
           "): [" + markdown_text(finding.fixture) + "](" +
           markdown_text(fixture_href(finding.fixture)) + ")\n";
    for (const std::string& command : reproduce_commands(record, finding)) {
      out += "  " + markdown_code(command) + "\n";
    }
  }
  return out.empty() ? "" : "### Reproduce\n\n" + out + "\n";
}

std::string markdown_findings(const CampaignRecord& record) {
  std::string out = "## Findings\n\n" + findings_sentence(record) + "\n\n";
  if (!record.findings.empty()) out += markdown_table(findings_table(record));
  return out + markdown_reproduce(record);
}

std::string markdown_events(const CampaignRecord& record) {
  return "## Cache-state events\n\n" + markdown_table(events_table(record)) +
         reached_sentence(record) +
         "\n\nCache states not reached: " + markdown_text(unreached_states_text(record)) + ".\n\n";
}

std::string markdown_corpus(const CampaignRecord& record) {
  if (record.corpora.empty()) return "## Corpus\n\nNo corpus recorded.\n\n";
  return "## Corpus\n\n" + markdown_table(corpus_table(record));
}

std::string markdown_progress(const CampaignRecord& record) {
  if (record.samples.empty()) return "## Progress\n\nNo samples yet.\n";
  return "## Progress\n\nAt each tenth of the elapsed time (the HTML report plots every "
         "sample):\n\n" +
         markdown_table(progress_table(record));
}

// Every artifact with a fixture: a link to it, and the commands that reproduce it.
std::string html_reproduce(const CampaignRecord& record) {
  std::string rows;
  for (const CampaignFinding& finding : record.findings) {
    if (finding.fixture.empty()) continue;
    rows += "<tr><td>" + markup_text(finding.signature) + "</td><td>" +
            markup_text(finding.artifact) + "</td><td><a href=\"" +
            markup_text(fixture_href(finding.fixture)) + "\">" + markup_text(finding.fixture) +
            "</a></td><td>";
    std::vector<std::string> commands;
    for (const std::string& command : reproduce_commands(record, finding)) {
      commands.push_back("<code>" + markup_text(command) + "</code>");
    }
    rows += joined(commands, "<br>") + "</td></tr>\n";
  }
  if (rows.empty()) return "";
  return "<h3>Reproduce</h3>\n<table>\n<tr><th>Signature</th><th>Artifact</th><th>Fixture</th>"
         "<th>Replay and explain</th></tr>\n" +
         rows + "</table>\n";
}

std::string html_findings(const CampaignRecord& record) {
  std::string out = "<h2>Findings</h2>\n" + html_paragraph(findings_sentence(record));
  if (!record.findings.empty()) out += html_table(findings_table(record));
  return out + html_reproduce(record);
}

std::string html_events(const CampaignRecord& record) {
  return "<h2>Cache-state events</h2>\n" + html_table(events_table(record)) +
         html_paragraph(reached_sentence(record)) +
         html_paragraph("Cache states not reached: " + unreached_states_text(record) + ".");
}

std::string html_corpus(const CampaignRecord& record) {
  if (record.corpora.empty()) return "<h2>Corpus</h2>\n" + html_paragraph("No corpus recorded.");
  return "<h2>Corpus</h2>\n" + html_table(corpus_table(record));
}

std::string html_plots(const CampaignRecord& record) {
  std::string out = "<h2>Plots</h2>\n";
  if (record.samples.empty()) return out + html_paragraph("No samples yet.");
  out += svg_chart(coverage_chart(record));
  out += svg_chart(reached_chart(record));
  out += svg_chart(speed_chart(record));
  out += svg_chart(failures_chart(record));
  out += "<h3>At each tenth of the elapsed time</h3>\n" + html_table(progress_table(record));
  return out;
}

}  // namespace

std::string campaign_markdown(const CampaignRecord& record) {
  return "# " + markdown_text(title_text(record)) + "\n\n## Settings\n\n" +
         markdown_table(settings_table(record)) + markdown_findings(record) +
         markdown_events(record) + markdown_corpus(record) + markdown_progress(record);
}

std::string campaign_html(const CampaignRecord& record) {
  const std::string title = markup_text(title_text(record));
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + title +
         "</title>\n<style>\n" + std::string(kStyle) + "</style>\n</head>\n<body>\n<h1>" + title +
         "</h1>\n<h2>Settings</h2>\n" + html_table(settings_table(record)) + html_findings(record) +
         html_events(record) + html_corpus(record) + html_plots(record) + "</body>\n</html>\n";
}

}  // namespace kvfuzz
