// Fuzz target: the bytes are the archive's entries, which the harness packs into a valid zip, so
// mutations reach the JSON (model, weights config, sample inputs) and the weights' byte counts
// instead of breaking the zip structure. Format: records of
//   [u16 name length][name][u32 data length][data]   (little endian; lengths clamped to the input)
// A data length with the top bit set stands for that many zero bytes (up to 64 MiB) with no data
// in the record: the seeds' weights, so that mutations land in the JSON and the sizes.
// fuzz/make_seeds.py writes the seeds from the fixtures' archives.
#include <algorithm>

#include "fuzz_common.h"
#include "zip_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<ptc::test::ZipItem> entries;
  size_t at = 0;
  auto take = [&](size_t n) {
    n = std::min(n, size - at);
    std::string s(reinterpret_cast<const char*>(data) + at, n);
    at += n;
    return s;
  };
  size_t zeros = 0;  // zero-filled bytes so far: at most 64 MiB in all
  while (at + 2 <= size && entries.size() < 256) {
    size_t name_len = data[at] | (data[at + 1] << 8);
    at += 2;
    std::string name = take(name_len);
    uint32_t data_len = 0;
    for (int i = 0; i < 4 && at < size; ++i) data_len |= uint32_t(data[at++]) << (8 * i);
    if (data_len & 0x80000000u) {
      const size_t n = std::min<size_t>(data_len & 0x7fffffffu, (size_t(64) << 20) - zeros);
      zeros += n;
      entries.push_back({std::move(name), std::string(n, '\0')});
    } else
      entries.push_back({std::move(name), take(data_len)});
  }
  ptc::fuzz::compile_front_half(ptc::test::make_zip(entries));
  return 0;
}
