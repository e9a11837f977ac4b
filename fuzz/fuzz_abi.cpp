// Fuzz target: the C ABI's argument checks of a generated library ($PTC_FUZZ_LIB, opened once).
// The bytes choose the calls and every argument: counts, dtype codes, ranks, sizes (negative,
// huge, overflowing), null pointers, output descriptors, and the input data (e.g. embedding ids
// out of range). The harness keeps the caller's side of the contract (a data buffer holds what its
// sizes say, a sizes array holds `rank` entries, up to 64), so any out-of-bounds access the
// sanitizers see is the library's. Build the library with the harness's sanitizers:
//   ptc compile models/index_ops.pt2 -o abi.so --sanitize address,undefined [--cxx clang++]
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "ptc/runtime.h"

namespace {

struct Api {
  ptc_model* m = nullptr;
  decltype(&ptc_run) run;
  decltype(&ptc_output_shape) output_shape;
  decltype(&ptc_input_info) input_info;
  decltype(&ptc_output_info) output_info;
  decltype(&ptc_symbol_info) symbol_info;
  decltype(&ptc_num_inputs) num_inputs;
  decltype(&ptc_num_outputs) num_outputs;
  decltype(&ptc_last_error) last_error;
};

Api& api() {
  static Api a = [] {
    const char* path = std::getenv("PTC_FUZZ_LIB");
    if (!path) {
      std::fprintf(stderr, "fuzz_abi: set PTC_FUZZ_LIB to a library written by ptc compile\n");
      std::exit(2);
    }
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "fuzz_abi: %s\n", dlerror());
      std::exit(2);
    }
    Api r;
    auto sym = [&](const char* name) {
      void* p = dlsym(h, name);
      if (!p) std::fprintf(stderr, "fuzz_abi: %s has no %s\n", path, name), std::exit(2);
      return p;
    };
    r.run = reinterpret_cast<decltype(r.run)>(sym("ptc_run"));
    r.output_shape = reinterpret_cast<decltype(r.output_shape)>(sym("ptc_output_shape"));
    r.input_info = reinterpret_cast<decltype(r.input_info)>(sym("ptc_input_info"));
    r.output_info = reinterpret_cast<decltype(r.output_info)>(sym("ptc_output_info"));
    r.symbol_info = reinterpret_cast<decltype(r.symbol_info)>(sym("ptc_symbol_info"));
    r.num_inputs = reinterpret_cast<decltype(r.num_inputs)>(sym("ptc_num_inputs"));
    r.num_outputs = reinterpret_cast<decltype(r.num_outputs)>(sym("ptc_num_outputs"));
    r.last_error = reinterpret_cast<decltype(r.last_error)>(sym("ptc_last_error"));
    if (reinterpret_cast<decltype(&ptc_open)>(sym("ptc_open"))(nullptr, &r.m) != PTC_OK)
      std::fprintf(stderr, "fuzz_abi: ptc_open failed\n"), std::exit(2);
    return r;
  }();
  return a;
}

// Reads the fuzz input front to back; past the end, zeros.
struct Reader {
  const uint8_t* p;
  size_t n;
  template <class T>
  T get() {
    T v{};
    size_t k = std::min(sizeof v, n);
    std::memcpy(&v, p, k);
    p += k, n -= k;
    return v;
  }
};

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case PTC_UINT8: case PTC_INT8: case PTC_BOOL: return 1;
    case PTC_INT16: case PTC_FLOAT16: case PTC_BFLOAT16: return 2;
    case PTC_INT32: return 4;
    default: return 8;  // unknown codes: the library must refuse them before reading data
  }
}

constexpr size_t kMaxBytes = size_t(1) << 24;  // larger tensors: checked by ptc_output_shape only
constexpr int kMaxStoredRank = 64;

// One tensor argument as the bytes describe it; `owned` keeps its buffers alive.
struct Arg {
  std::vector<int64_t> sizes;
  std::vector<unsigned char> data;
  ptc_tensor t{};
  bool fits = true;  // the data buffer holds what the sizes say (else ptc_run is not called)
};

// `like`: the sizes the library expects (symbolic ones already chosen), which the bytes may keep
// or replace.
void describe(Reader& r, Arg& a, const std::vector<int64_t>& like, int like_rank, int32_t like_dtype) {
  uint8_t mode = r.get<uint8_t>();
  a.t.dtype = mode & 1 ? r.get<int32_t>() : like_dtype;
  a.t.rank = mode & 2 ? r.get<int8_t>() : like_rank;
  int stored = std::max(0, std::min<int>(a.t.rank, kMaxStoredRank));
  a.sizes.assign(stored, 1);
  for (int d = 0; d < stored; ++d)
    a.sizes[d] = mode & 4 ? r.get<int64_t>() : d < static_cast<int>(like.size()) ? like[d] : 1 + r.get<uint8_t>() % 16;
  a.t.sizes = mode & 8 ? nullptr : a.sizes.data();
  size_t count = 1;
  for (int64_t s : a.sizes) {
    if (s < 0 || (s > 0 && count > kMaxBytes / size_t(s))) {
      a.fits = false;
      break;
    }
    count *= size_t(s);
  }
  size_t bytes = a.fits ? count * element_size(a.t.dtype) : 0;
  a.fits = a.fits && bytes <= kMaxBytes;
  if (a.fits) {
    a.data.resize(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; ++i) a.data[i] = r.n ? r.get<uint8_t>() : static_cast<unsigned char>(i * 131);
    if (a.t.dtype == PTC_BOOL)  // the caller's contract: a bool is 0 or 1
      for (size_t i = 0; i < bytes; ++i) a.data[i] &= 1;
  }
  a.t.data = mode & 16 || !a.fits ? nullptr : a.data.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  Api& L = api();
  Reader r{bytes, size};
  uint8_t op = r.get<uint8_t>();
  ptc_model* m = op & 0x80 ? nullptr : L.m;  // a null handle now and then
  int n_in = op & 0x40 ? r.get<int8_t>() : L.num_inputs(L.m);
  std::vector<Arg> ins(std::max(0, n_in));  // an int8: at most 127, as many as the count says
  for (int i = 0; i < static_cast<int>(ins.size()); ++i) {
    ptc_tensor_info info{};
    std::vector<int64_t> like;
    bool known = L.input_info(L.m, i, &info) == PTC_OK;
    for (int d = 0; known && d < info.rank; ++d) like.push_back(info.sizes[d] >= 0 ? info.sizes[d] : 1 + r.get<uint8_t>() % 40);
    describe(r, ins[i], like, known ? info.rank : 2, known ? info.dtype : PTC_FLOAT32);
  }
  std::vector<ptc_tensor> tin;
  for (auto& a : ins) tin.push_back(a.t);
  const ptc_tensor* in_ptr = op & 0x20 ? nullptr : tin.data();

  switch (op & 3) {
    case 0: {  // info calls with any index
      ptc_tensor_info info;
      const char* name;
      int64_t lo, hi;
      int index = r.get<int32_t>();
      L.input_info(m, index, op & 4 ? nullptr : &info);
      L.output_info(m, index, op & 4 ? nullptr : &info);
      L.symbol_info(m, index, op & 8 ? nullptr : &name, &lo, &hi);
      break;
    }
    case 1: {  // ptc_output_shape: never reads data
      int64_t out[kMaxStoredRank];
      L.output_shape(m, n_in, in_ptr, r.get<int32_t>(), op & 4 ? nullptr : out);
      break;
    }
    default: {  // ptc_run, outputs as the library says or as the bytes say
      bool all_fit = true;
      for (auto& a : ins) all_fit = all_fit && a.fits;
      int n_out = op & 0x10 ? r.get<int8_t>() : L.num_outputs(L.m);
      std::vector<Arg> outs(std::max(0, n_out));
      for (int i = 0; i < static_cast<int>(outs.size()); ++i) {
        int64_t shape[kMaxStoredRank];
        ptc_tensor_info info{};
        bool known = L.output_info(L.m, i, &info) == PTC_OK &&
                     L.output_shape(L.m, static_cast<int>(tin.size()), tin.data(), i, shape) == PTC_OK;
        describe(r, outs[i], known ? std::vector<int64_t>(shape, shape + info.rank) : std::vector<int64_t>{},
                 known ? info.rank : 2, known ? info.dtype : PTC_FLOAT32);
        all_fit = all_fit && outs[i].fits;
      }
      std::vector<ptc_tensor> tout;
      for (auto& a : outs) tout.push_back(a.t);
      if (all_fit && L.run(m, n_in, in_ptr, n_out, op & 8 ? nullptr : tout.data()) != PTC_OK) (void)L.last_error();
      break;
    }
  }
  return 0;
}
