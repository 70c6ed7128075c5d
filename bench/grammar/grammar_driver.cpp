// Corpus driver for the structured-output engine (not a test; run by tools/grammar/run_corpus.py).
//
//   grammar_driver --tokenizer tokenizer.json --corpus corpus.jsonl --out DIR [--walks 2] [--max-steps 40]
//                  [--states-per-grammar 24] [--seed 1] [--repeat 1]
//
// corpus.jsonl: one {"id": ..., "kind": "json"|"regex"|"ebnf", "source": "..."} per line.
// For every grammar: compile (front end + DFAs, then the per-position mask cache, timed separately), then
// random walks under our mask over the real vocabulary: each step picks a uniformly random allowed token
// (or, after max-steps, the longest allowed token along a shortest completion, so walks end), then the stop
// token. Writes DIR/results.jsonl (per grammar: errors, timings, sampled texts, per-step mask times) and
// DIR/states.jsonl + DIR/masks.bin (token prefixes and our mask words for the anchor comparison).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "text/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  std::string tok_path, corpus, out;
  int walks = 2, max_steps = 40, states_per = 24, repeat = 1;
  unsigned seed = 1;
  bool any_ws = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value for " + a);
      return argv[++i];
    };
    if (a == "--tokenizer") tok_path = next();
    else if (a == "--corpus") corpus = next();
    else if (a == "--out") out = next();
    else if (a == "--walks") walks = std::stoi(next());
    else if (a == "--max-steps") max_steps = std::stoi(next());
    else if (a == "--states-per-grammar") states_per = std::stoi(next());
    else if (a == "--seed") seed = unsigned(std::stoul(next()));
    else if (a == "--any-whitespace") any_ws = true;
    else if (a == "--repeat") repeat = std::max(1, std::stoi(next()));
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  auto t0 = Clock::now();
  Tokenizer tok = Tokenizer::from_file(tok_path);
  auto info = TokenizerInfo::from_tokenizer(tok);
  std::cerr << "tokenizer info: " << info->vocab_size() << " ids, trie " << info->trie().byte.size() << " nodes, "
            << ms_since(t0) << " ms\n";
  std::unordered_map<std::string, int32_t> by_bytes;
  for (size_t i = 0; i < info->vocab_size(); ++i)
    if (info->is_text(int32_t(i))) by_bytes.emplace(std::string(info->token(int32_t(i))), int32_t(i));
  const int32_t eos = info->stop_ids()[0];

  std::ifstream in(corpus);
  std::ofstream res(out + "/results.jsonl"), st(out + "/states.jsonl");
  std::ofstream masks(out + "/masks.bin", std::ios::binary);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(info->mask_words());
  std::string line;
  size_t n_state = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json c = json::parse(line);
    json r;
    r["id"] = c["id"];
    std::string kind = c["kind"], src = c["source"];
    std::shared_ptr<const CompiledGrammar> cg;
    try {
      auto tc = Clock::now();
      Grammar g;
      if (kind == "json") {
        JsonSchemaOptions o;
        o.any_whitespace = any_ws;
        g = compile_json_schema(src, o);
      } else if (kind == "regex") {
        g = compile_regex(src);
      } else {
        g = compile_ebnf(src);
      }
      r["compile_ms"] = ms_since(tc);
      r["dfa_states"] = g.states.size();
      r["rules"] = g.rules.size();
      auto tp = Clock::now();
      cg = compile_for(std::move(g), info, true);
      r["precompute_ms"] = ms_since(tp);
      auto s = cg->stats();
      r["positions"] = s.positions;
      r["uncertain_total"] = s.uncertain;
      r["cache_bytes"] = s.bytes;
      r["ok"] = true;
    } catch (const Error& e) {
      r["ok"] = false;
      r["error"] = e.what();
      res << r.dump() << "\n";
      continue;
    }
    json samples = json::array(), times = json::array();
    std::vector<std::vector<int32_t>> prefixes;
    std::vector<std::pair<int, int>> where;  // (walk, step) of each prefix
    size_t rollback_checks = 0, rollback_mismatch = 0;
    std::vector<uint32_t> mask2(mask.size());
    for (int w = 0; w < walks; ++w) {
      GrammarMatcher m(cg);
      std::vector<int32_t> toks;
      std::string text;
      bool complete = false;
      for (int step = 0; step < max_steps + 400; ++step) {
        // best of `repeat` timings (fill_mask does not change the state); filters out scheduler preemption
        double best = 1e300;
        for (int k = 0; k < repeat; ++k) {
          auto tm = Clock::now();
          m.fill_mask(mask.data());
          best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - tm).count());
        }
        times.push_back(best);
        prefixes.push_back(toks);
        where.push_back({w, step});
        std::vector<int32_t> allowed;
        for (size_t k = 0; k < mask.size(); ++k)
          for (uint32_t x = mask[k]; x; x &= x - 1) allowed.push_back(int32_t(k * 32 + __builtin_ctz(x)));
        if (allowed.empty()) break;
        bool eos_ok = m.can_terminate();
        int32_t pick = -1;
        if (eos_ok && (step >= max_steps || std::uniform_real_distribution<>(0, 1)(rng) < 0.3)) {
          pick = eos;
        } else if (step < max_steps) {
          do pick = allowed[rng() % allowed.size()];
          while (pick == eos && allowed.size() > 1);
        } else {
          std::string comp = m.shortest_completion();
          for (size_t L = std::min<size_t>(comp.size(), 24); L >= 1 && pick < 0; --L) {
            auto it = by_bytes.find(comp.substr(0, L));
            if (it != by_bytes.end() && (mask[it->second >> 5] >> (it->second & 31) & 1)) pick = it->second;
          }
          if (pick < 0) pick = allowed[rng() % allowed.size()];
        }
        if (!m.accept(pick)) {
          std::cerr << "internal error: allowed token rejected\n";
          return 1;
        }
        if (pick == eos) {
          complete = true;
          break;
        }
        toks.push_back(pick);
        text += info->token(pick);
      }
      json sj;
      sj["tokens"] = toks;
      sj["text"] = text;
      sj["complete"] = complete;
      // rollback check: undo to a random earlier point; the mask must equal a fresh matcher's at that prefix
      if (m.history_size() > 0) {
        size_t back = 1 + rng() % m.history_size();
        m.rollback(back);
        size_t keep = m.history_size();
        GrammarMatcher fresh(cg);
        for (size_t k = 0; k < keep; ++k) fresh.accept(toks[k]);
        m.fill_mask(mask.data());
        fresh.fill_mask(mask2.data());
        ++rollback_checks;
        if (mask != mask2) ++rollback_mismatch;
      }
      samples.push_back(sj);
    }
    r["samples"] = samples;
    r["mask_ns"] = times;
    r["rollback_checks"] = rollback_checks;
    r["rollback_mismatch"] = rollback_mismatch;
    res << r.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    // states for the anchor comparison: evenly spaced over the recorded prefixes
    size_t take = std::min<size_t>(prefixes.size(), size_t(states_per));
    for (size_t k = 0; k < take; ++k) {
      size_t idx = take == prefixes.size() ? k : k * prefixes.size() / take;
      GrammarMatcher m(cg);
      for (int32_t t : prefixes[idx]) m.accept(t);
      m.fill_mask(mask.data());
      json sj;
      std::string forced = m.forced_bytes(256), hex;
      for (unsigned char ch : forced) {
        static const char* d = "0123456789abcdef";
        hex += d[ch >> 4];
        hex += d[ch & 15];
      }
      sj["forced_hex"] = hex;
      sj["id"] = c["id"];
      sj["prefix"] = prefixes[idx];
      sj["walk"] = where[idx].first;
      sj["step"] = where[idx].second;
      sj["index"] = n_state++;
      st << sj.dump() << "\n";
      masks.write(reinterpret_cast<const char*>(mask.data()), std::streamsize(mask.size() * 4));
    }
  }
  std::cerr << "done in " << ms_since(t0) / 1000 << " s\n";
  return 0;
}
