#include "generate/token_text.hpp"

namespace mpf {

std::string TokenText::next(int32_t id) {
  const bool first = first_;
  first_ = false;
  if (tokenizer_) return tokenizer_->decode(id);
  if (vocab_ == 256) return std::string(1, static_cast<char>(id));
  return (first ? "" : " ") + std::to_string(id);
}

}  // namespace mpf
