#include "data/npy.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace primus {

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
size_t descr_size(const std::string& d) {
  if (d.size() != 3 || (d[0] != '<' && d[0] != '|')) return 0;
  if (d[1] != 'i' && d[1] != 'u') return 0;
  if (d[2] != '1' && d[2] != '2' && d[2] != '4' && d[2] != '8') return 0;
  return static_cast<size_t>(d[2] - '0');
}
}  // namespace

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += fmt::format("{}{}", shape[i], shape.size() == 1 ? "," : ", ");
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // numpy pads the header with spaces so that the data starts at a multiple of 64 bytes, then a newline.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}", tmp));
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("write to {} failed (disk full?)", tmp));
  }
  std::filesystem::rename(tmp, path);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kRuntime, fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::kRuntime, fmt::format("{}: not a usable .npy file: {}", path, why));
  };
  if (s.size() < 10 || std::memcmp(s.data(), "\x93NUMPY", 6) != 0) throw bad("no .npy magic at byte 0");
  size_t hlen = 0, hstart = 0;
  if (s[6] == 1) {
    hlen = static_cast<uint8_t>(s[8]) | (static_cast<size_t>(static_cast<uint8_t>(s[9])) << 8);
    hstart = 10;
  } else if (s[6] == 2 || s[6] == 3) {
    if (s.size() < 12) throw bad("truncated header");
    uint32_t l;
    std::memcpy(&l, s.data() + 8, 4);
    hlen = l;
    hstart = 12;
  } else {
    throw bad(fmt::format("format version {}", static_cast<int>(s[6])));
  }
  if (hstart + hlen > s.size()) throw bad("truncated header");
  const std::string h = s.substr(hstart, hlen);
  NpyArray a;
  const size_t d = h.find("'descr':");
  if (d == std::string::npos) throw bad("no descr");
  const size_t q1 = h.find('\'', d + 8), q2 = q1 == std::string::npos ? q1 : h.find('\'', q1 + 1);
  if (q2 == std::string::npos) throw bad("bad descr");
  a.descr = h.substr(q1 + 1, q2 - q1 - 1);
  if (h.find("'fortran_order': False") == std::string::npos) throw bad("Fortran order");
  const size_t sh = h.find("'shape':");
  const size_t p1 = sh == std::string::npos ? sh : h.find('(', sh);
  const size_t p2 = p1 == std::string::npos ? p1 : h.find(')', p1);
  if (p2 == std::string::npos) throw bad("no shape");
  std::istringstream dims(h.substr(p1 + 1, p2 - p1 - 1));
  std::string tok;
  while (std::getline(dims, tok, ',')) {
    if (tok.find_first_not_of(" ") == std::string::npos) continue;
    try {
      a.shape.push_back(std::stoll(tok));
    } catch (...) {
      throw bad("bad shape");
    }
  }
  const size_t item = descr_size(a.descr);
  if (item == 0) throw bad(fmt::format("dtype {} (expected a little-endian integer)", a.descr));
  const size_t bytes = static_cast<size_t>(a.count()) * item;
  if (hstart + hlen + bytes != s.size())
    throw bad(fmt::format("{} data bytes for shape and dtype {}, file has {}", bytes, a.descr,
                          s.size() - hstart - hlen));
  a.data.assign(s.begin() + static_cast<std::ptrdiff_t>(hstart + hlen), s.end());
  return a;
}

std::vector<int64_t> npy_as_int64(const NpyArray& a, const std::string& path) {
  const size_t item = descr_size(a.descr);
  const bool is_signed = a.descr[1] == 'i';
  std::vector<int64_t> out(static_cast<size_t>(a.count()));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = a.data.data() + i * item;
    switch (item) {
      case 1:
        out[i] = is_signed ? static_cast<int64_t>(static_cast<int8_t>(*p)) : *p;
        break;
      case 2: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = is_signed ? static_cast<int64_t>(static_cast<int16_t>(v)) : v;
        break;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        out[i] = is_signed ? static_cast<int64_t>(static_cast<int32_t>(v)) : v;
        break;
      }
      default: {
        int64_t v;
        std::memcpy(&v, p, 8);
        out[i] = v;
        if (!is_signed && v < 0)
          throw Error(ErrorKind::kRuntime, fmt::format("{}: value out of range", path));
      }
    }
  }
  return out;
}

}  // namespace primus
