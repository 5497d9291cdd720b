// Slurm's compressed syntaxes, parsed without libslurm: hostlists ("n[1-3,5],gpu07", several
// bracket groups per name, zero padding kept) and tasks-per-node lists ("2(x3),1").
#include <charconv>

#include "parallel/rendezvous/launch_env.h"
#include "tensor/error.h"

namespace minidl::dist {

namespace {

// Splits at top-level commas (not those inside brackets or parentheses).
std::vector<std::string> split_top(const std::string& s, const std::string& what) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    MINIDL_CHECK(depth >= 0 && depth <= 1, what, " '", s, "': unbalanced brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  MINIDL_CHECK(depth == 0, what, " '", s, "': unbalanced brackets");
  parts.push_back(cur);
  return parts;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

long long to_number(const std::string& s, const std::string& list) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  MINIDL_CHECK(all_digits(s) && ec == std::errc() && p == s.data() + s.size(), "hostlist '", list,
               "': '", s, "' is not a number");
  return v;
}

// "1-3,5" inside brackets -> "1" "2" "3" "5", padded to the width of each range's lower bound.
std::vector<std::string> expand_ranges(const std::string& body, const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& r : split_top(body, "hostlist")) {
    const size_t dash = r.find('-');
    const std::string lo_s = r.substr(0, dash);
    const std::string hi_s = dash == std::string::npos ? lo_s : r.substr(dash + 1);
    const long long lo = to_number(lo_s, list), hi = to_number(hi_s, list);
    MINIDL_CHECK(lo <= hi, "hostlist '", list, "': range '", r, "' runs backwards");
    MINIDL_CHECK(hi - lo < 1000000, "hostlist '", list, "': range '", r, "' is too long");
    for (long long v = lo; v <= hi; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo_s.size()) n.insert(0, lo_s.size() - n.size(), '0');
      out.push_back(n);
    }
  }
  return out;
}

// One name with bracket groups: "r[1-2]n[1-2]" -> the product of its groups, in order.
std::vector<std::string> expand_name(const std::string& item, const std::string& list) {
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < item.size()) {
    const size_t open = item.find('[', i);
    const std::string text =
        item.substr(i, open == std::string::npos ? std::string::npos : open - i);
    MINIDL_CHECK(text.find(']') == std::string::npos, "hostlist '", list, "': stray ']'");
    for (std::string& n : names) n += text;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    MINIDL_CHECK(close != std::string::npos, "hostlist '", list, "': unbalanced brackets");
    const std::vector<std::string> values =
        expand_ranges(item.substr(open + 1, close - open - 1), list);
    std::vector<std::string> next;
    for (const std::string& n : names)
      for (const std::string& v : values) next.push_back(n + v);
    names = std::move(next);
    i = close + 1;
  }
  return names;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top(list, "hostlist")) {
    MINIDL_CHECK(!item.empty() && item[0] != '[', "hostlist '", list, "': empty host name");
    for (std::string& h : expand_name(item, list)) hosts.push_back(std::move(h));
  }
  return hosts;
}

std::string first_host(const std::string& list) {
  std::vector<std::string> items = split_top(list, "hostlist");
  MINIDL_CHECK(!items.front().empty() && items.front()[0] != '[', "hostlist '", list,
               "': empty host name");
  return expand_name(items.front(), list).front();
}

std::vector<int> expand_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split_top(text, "tasks per node")) {
    const size_t paren = item.find('(');
    const std::string count_s = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      const std::string rep = item.substr(paren);  // "(x3)"
      MINIDL_CHECK(rep.size() > 3 && rep.size() < 10 && rep.substr(0, 2) == "(x" &&
                       rep.back() == ')' && all_digits(rep.substr(2, rep.size() - 3)),
                   "tasks per node '", text, "': '", item, "' is not N or N(xK)");
      repeat = std::stoi(rep.substr(2, rep.size() - 3));
    }
    MINIDL_CHECK(all_digits(count_s) && count_s.size() < 9 && repeat >= 1 && repeat < 1000000,
                 "tasks per node '", text, "': '", item, "' is not N or N(xK)");
    out.insert(out.end(), size_t(repeat), std::stoi(count_s));
  }
  return out;
}

}  // namespace minidl::dist
