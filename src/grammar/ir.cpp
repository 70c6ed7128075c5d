// Grammar IR: expression helpers, code-point sets and their UTF-8 lowering, and compile(): each rule's
// expression -> Thompson NFA (bytes, rule references, epsilon) -> DFA by subset construction over byte
// classes and referenced rules.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

Expr Expr::byte_range(uint8_t lo, uint8_t hi) { return bytes({{lo, hi}}); }
Expr Expr::bytes(std::vector<std::pair<uint8_t, uint8_t>> r) {
  Expr e;
  e.kind = Kind::Bytes;
  e.ranges = std::move(r);
  return e;
}
Expr Expr::literal(std::string_view s) {
  std::vector<Expr> k;
  for (unsigned char c : s) k.push_back(byte_range(c, c));
  if (k.size() == 1) return std::move(k[0]);
  return seq(std::move(k));
}
Expr Expr::seq(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = kids.empty() ? Kind::Empty : Kind::Seq;
  e.kids = std::move(kids);
  return e;
}
Expr Expr::alt(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::Alt;
  e.kids = std::move(kids);
  if (e.kids.empty()) {  // an empty alternation matches nothing: an empty byte set
    e.kind = Kind::Bytes;
  }
  return e;
}
Expr Expr::repeat(Expr kid, int32_t min, int32_t max) {
  Expr e;
  e.kind = Kind::Repeat;
  e.min = min;
  e.max = max;
  e.kids.push_back(std::move(kid));
  return e;
}
Expr Expr::ref(int32_t rule) {
  Expr e;
  e.kind = Kind::Ref;
  e.rule = rule;
  return e;
}

// ---------------- code-point sets ----------------

CharSet charset_normalize(CharSet s) {
  CharSet cut;
  for (auto [lo, hi] : s) {
    if (lo > hi) continue;
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  CharSet out;
  for (auto r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CharSet charset_complement(const CharSet& in) {
  CharSet s = charset_normalize(in), out;
  uint32_t next = 0;
  for (auto [lo, hi] : s) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return charset_normalize(out);
}

namespace {

int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void utf8_encode(uint32_t c, uint8_t* b) {
  switch (utf8_len(c)) {
    case 1: b[0] = uint8_t(c); break;
    case 2: b[0] = uint8_t(0xC0 | (c >> 6)); b[1] = uint8_t(0x80 | (c & 0x3F)); break;
    case 3:
      b[0] = uint8_t(0xE0 | (c >> 12)); b[1] = uint8_t(0x80 | ((c >> 6) & 0x3F)); b[2] = uint8_t(0x80 | (c & 0x3F));
      break;
    default:
      b[0] = uint8_t(0xF0 | (c >> 18)); b[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
      b[2] = uint8_t(0x80 | ((c >> 6) & 0x3F)); b[3] = uint8_t(0x80 | (c & 0x3F));
  }
}

// Splits [lo, hi] (same encoded length) into pieces whose UTF-8 encodings are products of byte ranges.
void utf8_split(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;  // low bits covered by the last i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  utf8_encode(lo, a);
  utf8_encode(hi, b);
  std::vector<Expr> parts;
  for (int i = 0; i < n; ++i) parts.push_back(Expr::byte_range(a[i], b[i]));
  out.push_back(Expr::seq(std::move(parts)));
}

}  // namespace

Expr utf8_expr(const CharSet& in) {
  CharSet s = charset_normalize(in);
  std::vector<Expr> alts;
  std::vector<std::pair<uint8_t, uint8_t>> ascii;
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (auto [lo, hi] : s) {
    uint32_t start = lo;
    for (uint32_t b : bounds) {
      if (start > hi) break;
      if (start > b) continue;
      uint32_t end = std::min(hi, b);
      if (b == 0x7F)
        ascii.push_back({uint8_t(start), uint8_t(end)});
      else
        utf8_split(start, end, alts);
      start = end + 1;
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), Expr::bytes(std::move(ascii)));
  return Expr::alt(std::move(alts));
}

// ---------------- grammar ----------------

int32_t Grammar::add_rule(std::string name, Expr body) {
  rules.push_back({std::move(name), std::move(body)});
  return int32_t(rules.size() - 1);
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return int32_t(i);
  return -1;
}

namespace {

void describe_expr(const Grammar& g, const Expr& e, std::string& out) {
  switch (e.kind) {
    case Expr::Kind::Empty: out += "\"\""; break;
    case Expr::Kind::Bytes: {
      out += "[";
      char buf[16];
      for (auto [lo, hi] : e.ranges) {
        snprintf(buf, sizeof buf, "\\x%02X", lo);
        out += buf;
        if (hi != lo) {
          snprintf(buf, sizeof buf, "-\\x%02X", hi);
          out += buf;
        }
      }
      out += "]";
      break;
    }
    case Expr::Kind::Seq:
    case Expr::Kind::Alt:
      out += "(";
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i) out += e.kind == Expr::Kind::Alt ? " | " : " ";
        describe_expr(g, e.kids[i], out);
      }
      out += ")";
      break;
    case Expr::Kind::Repeat:
      describe_expr(g, e.kids[0], out);
      out += "{" + std::to_string(e.min) + "," + (e.max < 0 ? std::string() : std::to_string(e.max)) + "}";
      break;
    case Expr::Kind::Ref:
      out += e.rule >= 0 && size_t(e.rule) < g.rules.size() ? g.rules[e.rule].name : "<bad-ref>";
      break;
  }
}

// Thompson NFA for one rule.
struct Nfa {
  struct Edge {
    int kind;  // 0 eps, 1 byte range, 2 ref
    uint8_t lo, hi;
    int32_t rule;
    int32_t to;
  };
  std::vector<std::vector<Edge>> out;
  size_t limit;
  const std::string* rule_name;

  int32_t add() {
    if (out.size() >= limit)
      throw Error("grammar rule '" + *rule_name + "' is too large: more than " + std::to_string(limit) +
                  " NFA states (reduce repetition bounds or pattern size)");
    out.emplace_back();
    return int32_t(out.size() - 1);
  }
  void eps(int32_t a, int32_t b) { out[a].push_back({0, 0, 0, -1, b}); }

  // Builds e between fresh/given states: returns end state, starting from `from`.
  int32_t build(const Expr& e, int32_t from, size_t max_repeat, int depth) {
    if (depth > 2000) throw Error("grammar rule '" + *rule_name + "' is nested too deeply (> 2000 levels)");
    switch (e.kind) {
      case Expr::Kind::Empty: return from;
      case Expr::Kind::Bytes: {
        int32_t to = add();
        for (auto [lo, hi] : e.ranges) out[from].push_back({1, lo, hi, -1, to});
        return to;
      }
      case Expr::Kind::Ref: {
        int32_t to = add();
        out[from].push_back({2, 0, 0, e.rule, to});
        return to;
      }
      case Expr::Kind::Seq: {
        int32_t cur = from;
        for (const Expr& k : e.kids) cur = build(k, cur, max_repeat, depth + 1);
        return cur;
      }
      case Expr::Kind::Alt: {
        int32_t end = add();
        for (const Expr& k : e.kids) {
          int32_t s = add();
          eps(from, s);
          eps(build(k, s, max_repeat, depth + 1), end);
        }
        return end;
      }
      case Expr::Kind::Repeat: {
        if (e.min < 0 || (e.max >= 0 && e.max < e.min))
          throw Error("grammar rule '" + *rule_name + "': bad repetition bounds {" + std::to_string(e.min) +
                      "," + std::to_string(e.max) + "}");
        if (size_t(e.min) > max_repeat || (e.max >= 0 && size_t(e.max) > max_repeat))
          throw Error("grammar rule '" + *rule_name + "': repetition bound " +
                      std::to_string(std::max(e.min, e.max)) + " exceeds the limit " + std::to_string(max_repeat));
        int32_t cur = from;
        for (int i = 0; i < e.min; ++i) cur = build(e.kids[0], cur, max_repeat, depth + 1);
        if (e.max < 0) {
          int32_t loop = add();
          eps(cur, loop);
          int32_t body_end = build(e.kids[0], loop, max_repeat, depth + 1);
          eps(body_end, loop);
          return loop;
        }
        int32_t end = add();
        eps(cur, end);
        for (int i = e.min; i < e.max; ++i) {
          cur = build(e.kids[0], cur, max_repeat, depth + 1);
          eps(cur, end);
        }
        return end;
      }
    }
    return from;
  }
};

}  // namespace

std::string Grammar::describe() const {
  std::string out;
  for (size_t i = 0; i < rules.size(); ++i) {
    out += rules[i].name + " ::= ";
    describe_expr(*this, rules[i].body, out);
    out += "\n";
  }
  return out;
}

void compile(Grammar& g, const Limits& limits) {
  if (g.rules.empty()) throw Error("grammar has no rules");
  if (g.root < 0 || size_t(g.root) >= g.rules.size()) throw Error("grammar root rule index is out of range");
  const size_t nr = g.rules.size();
  g.states.clear();
  g.rule_start.assign(nr, -1);

  for (size_t r = 0; r < nr; ++r) {
    Nfa nfa;
    nfa.limit = limits.max_nfa_states_per_rule;
    nfa.rule_name = &g.rules[r].name;
    int32_t s0 = nfa.add();
    int32_t fin = nfa.build(g.rules[r].body, s0, limits.max_repeat, 0);
    for (auto& edges : nfa.out)
      for (auto& ed : edges)
        if (ed.kind == 2 && (ed.rule < 0 || size_t(ed.rule) >= nr))
          throw Error("grammar rule '" + g.rules[r].name + "' refers to an undefined rule");

    // Byte classes: bytes that no edge distinguishes behave the same.
    bool cut[257] = {};
    cut[0] = cut[256] = true;
    for (auto& edges : nfa.out)
      for (auto& ed : edges)
        if (ed.kind == 1) cut[ed.lo] = cut[ed.hi + 1] = true;
    std::vector<std::pair<int, int>> classes;  // [lo, hi]
    for (int b = 0; b < 256;) {
      int e = b + 1;
      while (!cut[e]) ++e;
      classes.push_back({b, e - 1});
      b = e;
    }

    auto closure = [&](std::vector<int32_t> set) {
      std::vector<char> seen(nfa.out.size(), 0);
      std::vector<int32_t> stack = set, res;
      for (int32_t s : set) seen[s] = 1;
      while (!stack.empty()) {
        int32_t s = stack.back();
        stack.pop_back();
        res.push_back(s);
        for (auto& ed : nfa.out[s])
          if (ed.kind == 0 && !seen[ed.to]) {
            seen[ed.to] = 1;
            stack.push_back(ed.to);
          }
      }
      std::sort(res.begin(), res.end());
      return res;
    };

    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> sets;
    const int32_t base = int32_t(g.states.size());
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      if (sets.size() >= limits.max_dfa_states_per_rule)
        throw Error("grammar rule '" + g.rules[r].name + "' is too large: more than " +
                    std::to_string(limits.max_dfa_states_per_rule) + " DFA states");
      int32_t id = int32_t(sets.size());
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      DfaState st;
      std::fill(std::begin(st.next), std::end(st.next), -1);
      st.rule = int32_t(r);
      g.states.push_back(std::move(st));
      return id;
    };
    intern(closure({s0}));
    for (size_t i = 0; i < sets.size(); ++i) {
      std::vector<int32_t> cur = sets[i];
      DfaState& st0 = g.states[base + i];
      st0.final = std::binary_search(cur.begin(), cur.end(), fin);
      for (auto [lo, hi] : classes) {
        std::vector<int32_t> tgt;
        for (int32_t s : cur)
          for (auto& ed : nfa.out[s])
            if (ed.kind == 1 && ed.lo <= lo && hi <= ed.hi) tgt.push_back(ed.to);
        if (tgt.empty()) continue;
        std::sort(tgt.begin(), tgt.end());
        tgt.erase(std::unique(tgt.begin(), tgt.end()), tgt.end());
        int32_t t = base + intern(closure(std::move(tgt)));
        DfaState& st = g.states[base + i];
        for (int b = lo; b <= hi; ++b) st.next[b] = t;
        st.has_bytes = true;
      }
      std::map<int32_t, std::vector<int32_t>> by_rule;
      for (int32_t s : cur)
        for (auto& ed : nfa.out[s])
          if (ed.kind == 2) by_rule[ed.rule].push_back(ed.to);
      for (auto& [rule, tgt] : by_rule) {
        std::sort(tgt.begin(), tgt.end());
        tgt.erase(std::unique(tgt.begin(), tgt.end()), tgt.end());
        int32_t t = base + intern(closure(tgt));
        g.states[base + i].refs.push_back({rule, t});
      }
    }
    // Moore minimization of this rule's DFA: fewer positions to precompute, and call sites whose return
    // states are equivalent (e.g. the item after the first and after later commas) collapse into one.
    const size_t n = sets.size();
    std::vector<int32_t> cls(n, 0);
    {
      std::map<std::vector<int32_t>, int32_t> init;
      for (size_t i = 0; i < n; ++i) {
        const DfaState& s = g.states[base + i];
        std::vector<int32_t> key{s.final ? 1 : 0};
        for (auto [rule, ret] : s.refs) key.push_back(rule);
        cls[i] = init.emplace(key, int32_t(init.size())).first->second;
      }
      size_t count = init.size();
      while (true) {
        std::map<std::vector<int32_t>, int32_t> sig;
        std::vector<int32_t> next_cls(n);
        std::vector<int32_t> key;
        for (size_t i = 0; i < n; ++i) {
          const DfaState& s = g.states[base + i];
          key.assign(1, cls[i]);
          for (int b = 0; b < 256; ++b) key.push_back(s.next[b] < 0 ? -1 : cls[s.next[b] - base]);
          for (auto [rule, ret] : s.refs) {
            key.push_back(rule);
            key.push_back(cls[ret - base]);
          }
          next_cls[i] = sig.emplace(key, int32_t(sig.size())).first->second;
        }
        cls.swap(next_cls);
        if (sig.size() == count) break;
        count = sig.size();
      }
      std::vector<DfaState> merged(count);
      std::vector<char> done(count, 0);
      for (size_t i = 0; i < n; ++i) {
        int32_t c = cls[i];
        if (done[c]) continue;
        done[c] = 1;
        DfaState s = g.states[base + i];
        for (int b = 0; b < 256; ++b)
          if (s.next[b] >= 0) s.next[b] = base + cls[s.next[b] - base];
        for (auto& [rule, ret] : s.refs) ret = base + cls[ret - base];
        merged[c] = std::move(s);
      }
      g.states.resize(base);
      for (auto& s : merged) g.states.push_back(std::move(s));
    }
    g.rule_start[r] = base + cls[0];
  }

  // Callers (distinct return states per referenced rule).
  g.callers.assign(nr, {});
  for (auto& st : g.states)
    for (auto [rule, ret] : st.refs) g.callers[rule].push_back(ret);
  for (auto& c : g.callers) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }

  // Nullable rules (fixpoint), then left recursion: rule A calls B at a state reachable from A's start
  // through nullable references only; a cycle in that relation never consumes input.
  std::vector<char> nullable(nr, 0);
  auto reach_from_start = [&](size_t r, std::vector<int32_t>* called) {
    std::vector<int32_t> stack{g.rule_start[r]};
    std::set<int32_t> seen{g.rule_start[r]};
    bool can_end = false;
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      if (g.states[s].final) can_end = true;
      for (auto [rule, ret] : g.states[s].refs) {
        if (called) called->push_back(rule);
        if (nullable[rule] && seen.insert(ret).second) stack.push_back(ret);
      }
    }
    return can_end;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < nr; ++r)
      if (!nullable[r] && reach_from_start(r, nullptr)) nullable[r] = changed = true;
  }
  std::vector<std::vector<int32_t>> left(nr);
  for (size_t r = 0; r < nr; ++r) reach_from_start(r, &left[r]);
  std::vector<int> color(nr, 0);  // 0 new, 1 on stack, 2 done
  for (size_t r0 = 0; r0 < nr; ++r0) {
    if (color[r0]) continue;
    std::vector<std::pair<int32_t, size_t>> st{{int32_t(r0), 0}};
    color[r0] = 1;
    while (!st.empty()) {
      auto& [r, i] = st.back();
      if (i < left[r].size()) {
        int32_t nx = left[r][i++];
        if (color[nx] == 1)
          throw Error("grammar rule '" + g.rules[nx].name +
                      "' is left-recursive (it can reach itself without consuming input); rewrite it with "
                      "repetition");
        if (color[nx] == 0) {
          color[nx] = 1;
          st.push_back({nx, 0});
        }
      } else {
        color[r] = 2;
        st.pop_back();
      }
    }
  }
}

}  // namespace deepinfer::grammar
