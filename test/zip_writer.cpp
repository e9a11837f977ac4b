#include "zip_writer.h"

#include <zlib.h>

#include <stdexcept>

namespace ptc::test {
namespace {

void put16(std::string& s, uint32_t v) { s.push_back(char(v & 0xff)), s.push_back(char((v >> 8) & 0xff)); }
void put32(std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); }

std::string raw_deflate(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, static_cast<uLong>(in.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

}  // namespace

std::string make_zip(const std::vector<ZipItem>& items) {
  size_t total = 0;
  for (const ZipItem& it : items) total += it.data.size() + it.name.size() + 128;
  if (total >= UINT32_MAX) throw std::length_error("make_zip: archives over 4 GiB need zip64, which this writer does not write");
  std::string out, dir;
  for (const ZipItem& it : items) {
    const std::string body = it.deflate ? raw_deflate(it.data) : it.data;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(it.data.data()), static_cast<uInt>(it.data.size())));
    const uint32_t size = static_cast<uint32_t>(it.declared >= 0 ? it.declared : static_cast<int64_t>(it.data.size()));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    auto common = [&](std::string& s) {  // version needed .. name length, the same in both headers
      put16(s, 20), put16(s, 0), put16(s, it.deflate ? 8 : 0), put16(s, 0), put16(s, 0);
      put32(s, crc), put32(s, static_cast<uint32_t>(body.size())), put32(s, size);
      put16(s, static_cast<uint32_t>(it.name.size()));
    };
    put32(out, 0x04034b50), common(out), put16(out, 0), out += it.name, out += body;
    put32(dir, 0x02014b50), put16(dir, 20), common(dir);
    put16(dir, 0), put16(dir, 0), put16(dir, 0), put16(dir, 0), put32(dir, 0), put32(dir, offset), dir += it.name;
  }
  const uint32_t dir_offset = static_cast<uint32_t>(out.size());
  out += dir;
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
  put16(out, static_cast<uint32_t>(items.size())), put16(out, static_cast<uint32_t>(items.size()));
  put32(out, static_cast<uint32_t>(dir.size())), put32(out, dir_offset), put16(out, 0);
  return out;
}

}  // namespace ptc::test
