#pragma once
// UTF-8 and the bits of Unicode the tokenizers need: decoding, repair of invalid input, NFC.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace primus::utf8 {

// Length of the UTF-8 sequence starting at s[i] if it is valid (1..4), else 0.
size_t valid_sequence_length(std::string_view s, size_t i);
bool is_valid(std::string_view s);
// Replaces every invalid byte sequence with U+FFFD (as Python's errors="replace" does, one per maximal
// invalid subpart). Returns the number of replacements.
size_t repair(std::string_view s, std::string* out);

std::vector<char32_t> decode(std::string_view valid);  // precondition: is_valid
void append(char32_t cp, std::string* out);

// Unicode canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view valid);
uint8_t combining_class(char32_t cp);

}  // namespace primus::utf8
