// Token-level matcher: vocabulary trie, per-position token classification, and the pushdown runtime.
#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"

namespace deepinfer::grammar {

namespace {
constexpr int32_t kEnd = -1;      // below the root frame: the grammar is complete
constexpr int32_t kUnknown = -2;  // precompute only: the stack below is not known

struct Node {
  int32_t state, parent;
};
}  // namespace

// Interned stack nodes (state, parent). Open addressing; entries may go stale after truncate(), which the
// lookup detects by comparing the node stored at the id.
struct GrammarMatcher::NodePool {
  std::vector<Node> nodes;
  std::vector<uint64_t> keys;
  std::vector<int32_t> ids;
  size_t used = 0;

  NodePool() { rehash(1024); }
  static uint64_t key(int32_t s, int32_t p) { return (uint64_t(uint32_t(s)) << 32) | uint32_t(p); }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  void rehash(size_t cap) {
    std::vector<uint64_t> ok = std::move(keys);
    std::vector<int32_t> oi = std::move(ids);
    keys.assign(cap, ~0ULL);
    ids.assign(cap, -1);
    used = 0;
    for (size_t i = 0; i < ok.size(); ++i)
      if (ok[i] != ~0ULL && oi[i] >= 0 && size_t(oi[i]) < nodes.size()) {
        size_t h = hash(ok[i]) & (cap - 1);
        while (keys[h] != ~0ULL) h = (h + 1) & (cap - 1);
        keys[h] = ok[i];
        ids[h] = oi[i];
        ++used;
      }
  }
  int32_t intern(int32_t s, int32_t p) {
    uint64_t k = key(s, p);
    size_t mask = keys.size() - 1, h = hash(k) & mask;
    while (keys[h] != ~0ULL) {
      if (keys[h] == k) {
        int32_t id = ids[h];
        if (id >= 0 && size_t(id) < nodes.size() && nodes[id].state == s && nodes[id].parent == p) return id;
        id = int32_t(nodes.size());
        nodes.push_back({s, p});
        ids[h] = id;
        return id;
      }
      h = (h + 1) & mask;
    }
    int32_t id = int32_t(nodes.size());
    nodes.push_back({s, p});
    keys[h] = k;
    ids[h] = id;
    if (++used * 2 > keys.size()) rehash(keys.size() * 2);
    return id;
  }
  void clear() {
    nodes.clear();
    std::fill(keys.begin(), keys.end(), ~0ULL);
    used = 0;
  }
};

namespace {

using Frame = GrammarMatcher::Frame;
using Pool = GrammarMatcher::NodePool;

// The closure / advance logic, shared by the runtime (parents are real nodes or kEnd) and the precompute
// walk (the bottom frame's parent is kUnknown).
struct Stepper {
  const Grammar& g;
  Pool& pool;
  std::vector<Frame> stack, seen;

  static bool tail(const DfaState& s) { return s.final && !s.has_bytes && s.refs.empty(); }

  void closure(Frame f, std::vector<Frame>& out, bool& ended, bool& escaped) {
    stack.clear();
    stack.push_back(f);
    while (!stack.empty()) {
      Frame x = stack.back();
      stack.pop_back();
      if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
      seen.push_back(x);
      const DfaState& s = g.states[x.state];
      if (s.has_bytes) out.push_back(x);
      for (auto [rule, ret] : s.refs) {
        int32_t parent = tail(g.states[ret]) ? x.parent : pool.intern(ret, x.parent);
        stack.push_back({g.rule_start[rule], parent});
      }
      if (s.final) {
        if (x.parent == kEnd) {
          ended = true;
        } else if (x.parent == kUnknown) {
          const auto& c = g.callers[s.rule];
          if (s.rule == g.root && c.empty()) ended = true;
          else if (s.rule != g.root && c.size() == 1) stack.push_back({c[0], kUnknown});
          else escaped = true;
        } else {
          Node n = pool.nodes[x.parent];
          stack.push_back({n.state, n.parent});
        }
      }
    }
  }

  // out = frames after consuming byte b from `in`; returns !out.empty().
  bool advance(const std::vector<Frame>& in, uint8_t b, std::vector<Frame>& out, bool& ended, bool& escaped) {
    out.clear();
    if (in.size() == 1) {
      int32_t t = g.states[in[0].state].next[b];
      if (t < 0) return false;
      const DfaState& s = g.states[t];
      if (!s.final && s.refs.empty()) {
        out.push_back({t, in[0].parent});
        return true;
      }
    }
    seen.clear();
    for (const Frame& f : in) {
      int32_t t = g.states[f.state].next[b];
      if (t >= 0) closure({t, f.parent}, out, ended, escaped);
    }
    if (out.size() > 1) {
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
    return !out.empty();
  }
};

void set_bit(uint32_t* w, int32_t id) { w[id >> 5] |= 1u << (id & 31); }
bool get_bit(const uint32_t* w, int32_t id) { return (w[id >> 5] >> (id & 31)) & 1u; }

}  // namespace

// ---------------- TokenizerInfo ----------------

std::shared_ptr<const TokenizerInfo> TokenizerInfo::from_bytes(std::vector<std::string> tokens,
                                                               std::vector<int32_t> stop_ids,
                                                               std::vector<int32_t> excluded) {
  auto t = std::make_shared<TokenizerInfo>();
  t->offsets_.push_back(0);
  t->text_.assign(tokens.size(), 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    t->bytes_ += tokens[i];
    t->offsets_.push_back(uint32_t(t->bytes_.size()));
    t->text_[i] = !tokens[i].empty();
  }
  for (int32_t id : excluded)
    if (id >= 0 && size_t(id) < tokens.size()) t->text_[id] = 0;
  for (int32_t id : stop_ids) {
    if (id < 0 || size_t(id) >= tokens.size()) throw Error("stop token id " + std::to_string(id) + " is out of range");
    t->text_[id] = 0;
  }
  t->stop_ids_ = std::move(stop_ids);
  t->build();
  return t;
}

void TokenizerInfo::build() {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i]) ids.push_back(int32_t(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    auto x = token(a), y = token(b);
    return x != y ? x < y : a < b;
  });
  Trie& t = trie_;
  std::vector<int32_t> path;  // node index per depth-1
  std::string_view prev;
  for (int32_t id : ids) {
    std::string_view s = token(id);
    max_len_ = std::max(max_len_, s.size());
    size_t l = 0;
    while (l < prev.size() && l < s.size() && l < path.size() && prev[l] == s[l]) ++l;
    while (path.size() > l) {
      t.end[path.back()] = int32_t(t.byte.size());
      path.pop_back();
    }
    for (size_t d = l; d < s.size(); ++d) {
      path.push_back(int32_t(t.byte.size()));
      t.byte.push_back(uint8_t(s[d]));
      t.depth.push_back(uint16_t(d + 1));
      t.end.push_back(0);
      t.tok_begin.push_back(int32_t(t.tokens.size()));
    }
    // tokens are appended in order, so the node's range is [tok_begin[node], tok_begin[node+1])
    t.tokens.push_back(id);
    prev = s;
  }
  while (!path.empty()) {
    t.end[path.back()] = int32_t(t.byte.size());
    path.pop_back();
  }
  t.tok_begin.push_back(int32_t(t.tokens.size()));
  if (max_len_ > 60000) throw Error("token longer than 60000 bytes");
}

// ---------------- CompiledGrammar ----------------

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenizerInfo> tok, bool precompute)
    : g_(std::move(g)), tok_(std::move(tok)) {
  if (!g_.compiled()) compile(g_);
  pos_.resize(g_.states.size());
  once_.reset(new std::once_flag[g_.states.size()]);
  if (precompute) precompute_all();
}

const CompiledGrammar::PositionMasks& CompiledGrammar::position(int32_t state) const {
  std::call_once(once_[state], [&] { compute(state, pos_[state]); });
  return pos_[state];
}

void CompiledGrammar::precompute_all() const {
  for (size_t s = 0; s < g_.states.size(); ++s)
    if (g_.states[s].has_bytes) position(int32_t(s));
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
  Stats st;
  for (size_t s = 0; s < g_.states.size(); ++s) {
    if (!g_.states[s].has_bytes) continue;
    const auto& p = position(int32_t(s));
    ++st.positions;
    st.accepted += p.accepted_count;
    st.uncertain += p.uncertain.size();
    st.bytes += p.accepted_bits.size() * 4 + p.accepted_list.size() * 4 + p.uncertain.size() * 4;
  }
  return st;
}

void CompiledGrammar::compute(int32_t state, PositionMasks& out) const {
  const auto& T = tok_->trie();
  Pool pool;
  Stepper st{g_, pool, {}, {}};
  size_t maxd = tok_->max_token_len() + 1;
  std::vector<std::vector<Frame>> F(maxd);
  std::vector<uint8_t> esc_upto(maxd, 0);
  F[0].push_back({state, kUnknown});
  std::vector<uint32_t> bits(tok_->mask_words(), 0);
  size_t count = 0;
  std::vector<int32_t>& unc = out.uncertain;
  const size_t nn = T.byte.size();
  for (size_t n = 0; n < nn;) {
    size_t d = T.depth[n];
    bool ended = false, esc = false;
    bool live = st.advance(F[d - 1], T.byte[n], F[d], ended, esc);
    esc_upto[d] = esc_upto[d - 1] || esc;
    for (int32_t k = T.tok_begin[n]; k < T.tok_begin[n + 1]; ++k) {
      if (live || ended || esc) {
        set_bit(bits.data(), T.tokens[k]);
        ++count;
      } else if (esc_upto[d]) {
        unc.push_back(T.tokens[k]);
      }
    }
    if (!live) {
      if (esc_upto[d])
        for (int32_t k = T.tok_begin[n + 1]; k < T.tok_begin[T.end[n]]; ++k) unc.push_back(T.tokens[k]);
      n = size_t(T.end[n]);
      continue;
    }
    ++n;
  }
  out.accepted_count = count;
  if (count * 32 > tok_->vocab_size()) {
    out.accepted_bits = std::move(bits);
  } else {
    for (size_t w = 0; w < bits.size(); ++w)
      for (uint32_t x = bits[w]; x; x &= x - 1) out.accepted_list.push_back(int32_t(w * 32 + __builtin_ctz(x)));
  }
}

std::shared_ptr<const CompiledGrammar> compile_for(Grammar g, std::shared_ptr<const TokenizerInfo> tok,
                                                   bool precompute) {
  return std::make_shared<CompiledGrammar>(std::move(g), std::move(tok), precompute);
}

// ---------------- GrammarMatcher ----------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> cg)
    : cg_(std::move(cg)), g_(&cg_->grammar()), pool_(std::make_unique<NodePool>()) {
  reset();
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::reset() {
  pool_->clear();
  frames_.clear();
  history_.clear();
  terminated_ = false;
  can_end_ = false;
  bool esc = false;
  Stepper st{*g_, *pool_, {}, {}};
  st.closure({g_->rule_start[g_->root], kEnd}, frames_, can_end_, esc);
  std::sort(frames_.begin(), frames_.end());
  frames_.erase(std::unique(frames_.begin(), frames_.end()), frames_.end());
}

bool GrammarMatcher::advance(const std::vector<Frame>& in, uint8_t b, std::vector<Frame>& out, bool& ended) {
  Stepper st{*g_, *pool_, std::move(work_), std::move(seen_)};
  bool esc = false;
  bool r = st.advance(in, b, out, ended, esc);
  work_ = std::move(st.stack);
  seen_ = std::move(st.seen);
  return r;
}

bool GrammarMatcher::walk(std::string_view bytes, std::vector<Frame>& frames, bool& ended) {
  std::vector<Frame> next;
  ended = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    ended = false;
    if (!advance(frames, uint8_t(bytes[i]), next, ended) && !(ended && i + 1 == bytes.size())) return false;
    frames.swap(next);
  }
  return true;
}

bool GrammarMatcher::check_token(std::string_view bytes) {
  std::vector<Frame> a = frames_;
  bool ended = false;
  if (!walk(bytes, a, ended)) return false;
  return !a.empty() || ended;
}

void GrammarMatcher::fill_mask(uint32_t* words) {
  const TokenizerInfo& tok = cg_->tokenizer();
  const size_t nw = tok.mask_words();
  std::memset(words, 0, nw * 4);
  if (terminated_) return;
  // accepted sets
  int32_t last = -1;
  for (const Frame& f : frames_) {
    if (f.state == last) continue;
    last = f.state;
    const auto& p = cg_->position(f.state);
    if (!p.accepted_bits.empty()) {
      const uint32_t* src = p.accepted_bits.data();
      for (size_t w = 0; w < nw; ++w) words[w] |= src[w];
    } else {
      for (int32_t id : p.accepted_list) set_bit(words, id);
    }
  }
  // uncertain tokens, checked against the real stacks; states per depth are reused along shared prefixes
  const size_t mark = pool_->nodes.size();
  const size_t maxd = tok.max_token_len() + 1;
  if (depth_frames_.size() < maxd) {
    depth_frames_.resize(maxd);
    depth_end_.resize(maxd);
  }
  last = -1;
  for (const Frame& f : frames_) {
    if (f.state == last) continue;
    last = f.state;
    const auto& p = cg_->position(f.state);
    if (p.uncertain.empty()) continue;
    depth_frames_[0] = frames_;
    size_t valid = 0;  // depth_frames_[0..valid] hold the states of prefixes of `prev`
    std::string_view prev;
    for (int32_t id : p.uncertain) {
      if (get_bit(words, id)) continue;
      std::string_view s = tok.token(id);
      size_t l = 0;
      while (l < valid && l < s.size() && l < prev.size() && prev[l] == s[l]) ++l;
      valid = l;
      bool dead = false;
      while (valid < s.size()) {
        if (depth_frames_[valid].empty()) {
          dead = true;
          break;
        }
        bool ended = false;
        advance(depth_frames_[valid], uint8_t(s[valid]), depth_frames_[valid + 1], ended);
        depth_end_[valid + 1] = ended;
        ++valid;
      }
      prev = s;
      if (dead) continue;
      if (!depth_frames_[s.size()].empty() || depth_end_[s.size()]) set_bit(words, id);
    }
  }
  pool_->nodes.resize(mark);
  if (can_end_)
    for (int32_t id : tok.stop_ids()) set_bit(words, id);
}

bool GrammarMatcher::accept(int32_t token) {
  const TokenizerInfo& tok = cg_->tokenizer();
  if (terminated_ || token < 0 || size_t(token) >= tok.vocab_size()) return false;
  for (int32_t s : tok.stop_ids())
    if (s == token) {
      if (!can_end_) return false;
      history_.push_back({frames_, can_end_});
      terminated_ = true;
      return true;
    }
  if (!tok.is_text(token)) return false;
  return accept_bytes(tok.token(token));
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_ || bytes.empty()) return false;
  std::vector<Frame> a = frames_;
  bool ended = false;
  if (!walk(bytes, a, ended)) return false;
  history_.push_back({std::move(frames_), can_end_});
  frames_ = std::move(a);
  can_end_ = ended;
  return true;
}

void GrammarMatcher::rollback(size_t n) {
  if (n > history_.size())
    throw Error("grammar matcher: cannot roll back " + std::to_string(n) + " tokens, only " +
                std::to_string(history_.size()) + " accepted");
  if (n == 0) return;
  Snapshot& s = history_[history_.size() - n];
  frames_ = std::move(s.frames);
  can_end_ = s.can_end;
  history_.resize(history_.size() - n);
  terminated_ = false;
}

std::string GrammarMatcher::forced_bytes(size_t max_len) {
  std::string out;
  std::vector<Frame> a = frames_, b;
  bool can_end = can_end_;
  if (terminated_) return out;
  while (out.size() < max_len && !can_end && !a.empty()) {
    int only = -1;
    bool many = false;
    for (int c = 0; c < 256 && !many; ++c)
      for (const Frame& f : a)
        if (g_->states[f.state].next[c] >= 0) {
          if (only >= 0 && only != c) many = true;
          only = c;
          break;
        }
    if (only < 0 || many) break;
    bool ended = false;
    advance(a, uint8_t(only), b, ended);
    a.swap(b);
    can_end = ended;
    out.push_back(char(only));
  }
  return out;
}

std::string GrammarMatcher::shortest_completion(size_t max_len) {
  if (can_end_ || terminated_ || frames_.empty()) return {};
  const auto& dist = cg_->completion_dist();
  const uint32_t inf = UINT32_MAX;
  auto add = [&](uint32_t x, uint32_t y) { return x == inf || y == inf ? inf : x + y; };
  // pick the stack with the smallest total
  uint64_t best = UINT64_MAX;
  const Frame* pick = nullptr;
  for (const Frame& f : frames_) {
    uint64_t total = dist[f.state];
    for (int32_t p = f.parent; p >= 0 && total < inf; p = pool_->nodes[p].parent) total += dist[pool_->nodes[p].state];
    if (total < best) {
      best = total;
      pick = &f;
    }
  }
  if (!pick || best >= inf || best > max_len) return {};
  std::string out;
  // expand(state): shortest string from `state` to the end of its rule, following the argmin edges
  size_t steps = 0;
  std::function<void(int32_t, int)> expand = [&](int32_t s, int depth) {
    while ((dist[s] != 0 || !g_->states[s].final) && ++steps < 4 * max_len + 1000 && depth < 10000) {
      const DfaState& st = g_->states[s];
      bool moved = false;
      for (int c = 0; c < 256 && !moved; ++c)
        if (st.next[c] >= 0 && add(1, dist[st.next[c]]) == dist[s]) {
          out.push_back(char(c));
          s = st.next[c];
          moved = true;
        }
      for (size_t k = 0; k < st.refs.size() && !moved; ++k) {
        auto [rule, ret] = st.refs[k];
        if (add(dist[g_->rule_start[rule]], dist[ret]) == dist[s]) {
          expand(g_->rule_start[rule], depth + 1);
          s = ret;
          moved = true;
        }
      }
      if (!moved) return;  // unreachable when dist is consistent
    }
  };
  expand(pick->state, 0);
  for (int32_t p = pick->parent; p >= 0; p = pool_->nodes[p].parent) expand(pool_->nodes[p].state, 0);
  return out;
}

const std::vector<uint32_t>& CompiledGrammar::completion_dist() const {
  std::call_once(dist_once_, [&] {
    const uint32_t inf = UINT32_MAX;
    const auto& st = g_.states;
    dist_.assign(st.size(), inf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t s = 0; s < st.size(); ++s) {
        uint32_t d = st[s].final ? 0 : inf;
        for (int c = 0; c < 256; ++c)
          if (st[s].next[c] >= 0 && dist_[st[s].next[c]] != inf) d = std::min(d, 1 + dist_[st[s].next[c]]);
        for (auto [rule, ret] : st[s].refs) {
          uint32_t a = dist_[g_.rule_start[rule]], b = dist_[ret];
          if (a != inf && b != inf) d = std::min(d, a + b);
        }
        if (d < dist_[s]) {
          dist_[s] = d;
          changed = true;
        }
      }
    }
  });
  return dist_;
}

}  // namespace deepinfer::grammar
