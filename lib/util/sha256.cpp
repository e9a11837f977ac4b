// SHA-256 as specified in FIPS 180-4 section 6.2.
#include "ptc/hash.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PTC_SHA_NI 1
#endif

#include "ptc/mapped_file.h"

namespace ptc {
namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

#ifdef PTC_SHA_NI
namespace {

// The x86 SHA extensions (SHA-NI): sha256rnds2 runs two rounds on the state held as ABEF and
// CDGH (lane 3 first: A,B,E,F and C,D,G,H), sha256msg1/msg2 extend the message schedule.
__attribute__((target("sha,sse4.1"))) void blocks_sha_ni(uint32_t h[8], const unsigned char* p, size_t nblocks) {
  const __m128i byteswap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);  // per 32-bit word
  const __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), 0x1B);
  const __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4)), 0x1B);
  __m128i abef = _mm_unpackhi_epi64(hgfe, dcba);  // lanes F, E, B, A
  __m128i cdgh = _mm_unpacklo_epi64(hgfe, dcba);  // lanes H, G, D, C
  for (; nblocks > 0; --nblocks, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i m[4];  // m[g % 4]: schedule words 4g .. 4g + 3
    for (int i = 0; i < 4; ++i)
      m[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), byteswap);
    for (int r = 0; r < 16; ++r) {  // rounds 4r .. 4r + 3
      const __m128i wk = _mm_add_epi32(m[r % 4], _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound + 4 * r)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);                            // now the state's ABEF
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));  // and this one too
      if (r < 12) {  // words 4(r + 4) ..: W[t-16] + s0(W[t-15]) + W[t-7] + s1(W[t-2])
        __m128i next = _mm_sha256msg1_epu32(m[r % 4], m[(r + 1) % 4]);
        next = _mm_add_epi32(next, _mm_alignr_epi8(m[(r + 3) % 4], m[(r + 2) % 4], 4));
        m[r % 4] = _mm_sha256msg2_epu32(next, m[(r + 3) % 4]);
      }
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm_shuffle_epi32(_mm_unpackhi_epi64(cdgh, abef), 0x1B));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), _mm_shuffle_epi32(_mm_unpacklo_epi64(cdgh, abef), 0x1B));
}

// CPUID: SHA extensions (leaf 7, EBX bit 29) and SSE4.1 (leaf 1, ECX bit 19). (Clang 14's
// __builtin_cpu_supports does not know "sha".)
bool have_sha_ni() {
  static const bool yes = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19))) return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
  }();
  return yes;
}

}  // namespace
#endif

void Sha256::blocks(const unsigned char* p, size_t n) {
#ifdef PTC_SHA_NI
  if (have_sha_ni() && !std::getenv("PTC_SHA256_PORTABLE")) return blocks_sha_ni(h_, p, n);
#endif
  for (; n > 0; --n, p += 64) block(p);
}

void Sha256::block(const unsigned char* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | uint32_t(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

Sha256& Sha256::update(const void* data, size_t n) {
  if (n == 0) return *this;  // (data may be null)
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (used_ > 0) {
    size_t take = std::min(n, sizeof buf_ - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take;
    p += take;
    n -= take;
    if (used_ < sizeof buf_) return *this;
    blocks(buf_, 1);
    used_ = 0;
  }
  blocks(p, n / 64);
  p += n / 64 * 64;
  n %= 64;
  std::memcpy(buf_, p, n);
  used_ = n;
  return *this;
}

Sha256& Sha256::field(const std::string& s) {
  uint64_t n = s.size();
  update(&n, sizeof n);
  return update(s);
}

std::string Sha256::hex() {
  uint64_t bits = total_ * 8;
  unsigned char pad[72] = {0x80};
  size_t padlen = (used_ < 56 ? 56 - used_ : 120 - used_);
  for (int i = 0; i < 8; ++i) pad[padlen + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(pad, padlen + 8);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int s = 28; s >= 0; s -= 4) out += digits[(v >> s) & 15];
  return out;
}

std::string sha256_file(const std::string& path) {
  auto f = MappedFile::open(path);
  return Sha256().update(f->data(), f->size()).hex();
}

}  // namespace ptc
