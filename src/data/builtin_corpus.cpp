#include "data/builtin_corpus.hpp"

#include <array>

namespace mpf {

namespace {

// splitmix64: a fixed, portable generator (std::uniform_int_distribution is not specified
// bit-for-bit across standard libraries, and the corpus must be the same everywhere).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  template <size_t N>
  const char* pick(const std::array<const char*, N>& words) {
    return words[next() % N];
  }
};

const std::array<const char*, 12> kAdjectives = {"small",  "red",   "old",   "quiet",
                                                 "bright", "cold",  "happy", "green",
                                                 "tall",   "brave", "slow",  "wise"};
const std::array<const char*, 12> kNouns = {"cat",  "dog",   "bird",  "fox",  "child", "king",
                                            "ship", "river", "house", "tree", "horse", "queen"};
const std::array<const char*, 10> kVerbs = {"sees",    "finds", "follows", "likes", "watches",
                                            "carries", "helps", "calls",   "meets", "hears"};
const std::array<const char*, 10> kNumbers = {"zero", "one", "two",   "three", "four",
                                              "five", "six", "seven", "eight", "nine"};

void append(std::vector<int32_t>& out, const std::string& text) {
  for (unsigned char c : text) out.push_back(c);
}

// One sentence of one of three kinds: a subject-verb-object clause, a count, or a sum.
std::string sentence(Rng& rng) {
  switch (rng.next() % 4) {
    case 0: {
      const uint64_t start = rng.next() % 6, len = 3 + rng.next() % 4;
      std::string s = "count:";
      for (uint64_t i = start; i < start + len && i < 10; ++i) s += std::string(" ") + kNumbers[i];
      return s + ".\n";
    }
    case 1: {
      const uint64_t a = rng.next() % 5, b = rng.next() % 5;
      return std::string(kNumbers[a]) + " plus " + kNumbers[b] + " is " + kNumbers[a + b] + ".\n";
    }
    default:
      return std::string("the ") + rng.pick(kAdjectives) + " " + rng.pick(kNouns) + " " +
             rng.pick(kVerbs) + " the " + rng.pick(kAdjectives) + " " + rng.pick(kNouns) + ".\n";
  }
}

}  // namespace

std::vector<int32_t> builtin_corpus(const std::string& split) {
  const bool val = split == "val";
  const size_t bytes = val ? (64u << 10) : (1u << 20);
  Rng rng{val ? 0x5EEDull : 0xC0FFEEull};
  std::vector<int32_t> out;
  out.reserve(bytes + 128);
  while (out.size() < bytes) append(out, sentence(rng));
  out.resize(bytes);
  return out;
}

}  // namespace mpf
