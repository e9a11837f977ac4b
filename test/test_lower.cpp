// Lowering to loop IR, checked end to end by the reference interpreter against PyTorch eager's
// outputs for every fixture (both .pt2 flavours, every recorded case).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <nlohmann/json.hpp>

#include "ptc/backend.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "ptc/npy.h"
#include "test_util.h"

using nlohmann::json;
using namespace ptc;

namespace {

// Uniform [-1, 1) float32 bytes for every input of g, symbolic sizes taken as `batch`.
std::vector<std::vector<std::byte>> random_inputs(const Graph& g, int64_t batch, std::mt19937& rng) {
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<std::vector<std::byte>> ins;
  for (const GraphInput& in : g.inputs) {
    int64_t numel = 1;
    for (const auto& s : in.value->type.sizes) numel *= s.as_const() ? *s.as_const() : batch;
    std::vector<float> v(static_cast<size_t>(numel));
    for (auto& e : v) e = U(rng);
    std::vector<std::byte> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    ins.push_back(std::move(bytes));
  }
  return ins;
}

// How many extern computations of this kind a program has.
int count_externs(const loop::Program& p, loop::ExternKind kind) {
  int n = 0;
  for (const auto& c : p.comps) n += c.kind == loop::Computation::Kind::Extern && c.extern_kind == kind;
  return n;
}

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Binds each symbolic input dimension to the size the reference input has.
// Two lowerings of one graph give the same first output at batch ("n") 1 and 3, within 1e-5 of
// its scale (which must not be tiny); `bytes`, when given, is that output's size.
void same_outputs(const loop::Program& want_p, const loop::Program& got_p, const Graph& g, std::mt19937& rng, size_t bytes = 0) {
  for (int64_t batch : {1, 3}) {
    auto ins = random_inputs(g, batch, rng);
    auto want = interpret(want_p, g, ins, {{"n", batch}});
    auto got = interpret(got_p, g, ins, {{"n", batch}});
    if (bytes) REQUIRE(want[0].size() == bytes);
    REQUIRE(want[0].size() == got[0].size());
    std::vector<float> a = floats(want[0]), c = floats(got[0]);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - c[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    }
    CHECK(scale > 0.1);
    CHECK(worst < 1e-5 * std::max(1.0, scale));
  }
}

std::map<std::string, int64_t> bind_symbols(const Graph& g, const std::vector<NpyArray>& ins) {
  std::map<std::string, int64_t> env;
  size_t k = 0;
  for (const auto& in : g.inputs) {
    if (in.role != GraphInput::Role::User) continue;
    const auto& sizes = in.value->type.sizes;
    REQUIRE(sizes.size() == ins.at(k).shape.size());
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d].kind() == sym::Kind::Symbol) env[sizes[d].name()] = ins[k].shape[d];
      else CHECK(sizes[d].as_const() == ins[k].shape[d]);
    ++k;
  }
  return env;
}

}  // namespace

// Runs every recorded case of fixture `name` through lowering + the interpreter (in the sanitizer
// builds only under `scripts/test.sh --full`: the interpreter is over 15x slower under ASan +
// UBSan).
void check_fixture_by_interpreter(const Graph& g, const std::string& name, const LowerOptions& opts) {
  json expect = json::parse(test::read_file(test::fixture(name + ".expect.json")));
  double atol = expect["tolerance"]["atol"].get<double>(), rtol = expect["tolerance"]["rtol"].get<double>();
  loop::Program prog = lower_to_loops(g, opts);
  INFO(loop::print_program(prog));
  for (const auto& c : expect["cases"]) {
    std::vector<NpyArray> ins;
    std::vector<std::vector<std::byte>> raw;
    for (const auto& f : c["inputs"]) {
      ins.push_back(read_npy(test::fixture(f["file"].get<std::string>())));
      raw.push_back(ins.back().data);
    }
    auto outs = interpret(prog, g, raw, bind_symbols(g, ins));
    REQUIRE(outs.size() == c["outputs"].size());
    for (size_t i = 0; i < outs.size(); ++i) {
      NpyArray ref = read_npy(test::fixture(c["outputs"][i]["file"].get<std::string>()));
      REQUIRE(outs[i].size() == ref.data.size());
      auto got = floats(outs[i]), want = floats(ref.data);
      double worst = 0;
      for (size_t j = 0; j < got.size(); ++j) {
        double err = std::fabs(got[j] - want[j]) - rtol * std::fabs(want[j]);
        worst = std::max(worst, err);
      }
      INFO(name << " case output " << i << ": worst error beyond rtol " << worst);
      CHECK(worst <= atol);
    }
  }
}

void check_fixture_by_interpreter(const Graph& g, const std::string& name) { check_fixture_by_interpreter(g, name, LowerOptions{}); }

TEST_CASE("lowering + interpreter match PyTorch eager on every fixture", "[lower]") {
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "mbv2_dyn", "tiny_tfm", "tfm_dyn", "index_ops", "mha"})
    for (const char* suffix : {".pt2", ".core.pt2"}) {
      INFO(name << suffix);
      auto g = load_pt2(test::fixture(std::string(name) + suffix));
      check_fixture_by_interpreter(*g, name);
    }
}

TEST_CASE("channels-last lowering (CUDA --channels-last) stores convolutions NHWC with KRSC weights and matches eager", "[lower]") {
  const LowerOptions opts = backend_named("cuda").lower_options(true, CompileOptions{});
  for (const char* suffix : {".pt2", ".core.pt2"}) {
    INFO(std::string("small_cnn") + suffix);
    auto g = run_graph_passes(*load_pt2(test::fixture(std::string("small_cnn") + suffix)), {}, test::channels_last_options());
    loop::Program p = lower_to_loops(*g, opts);
    std::string text = loop::print_program(p);
    INFO(text);
    int nhwc = 0;
    for (const auto& c : p.comps) {
      if (c.kind != loop::Computation::Kind::Extern || c.extern_kind != loop::ExternKind::Convolution) continue;
      nhwc += c.as<loop::ConvAttrs>().nhwc;
      CHECK(c.operands[1].channels_last());  // the KRSC weight
      CHECK(!c.operands[1].dense());
      CHECK(p.buffers[c.operands[1].buffer].kind == loop::Buffer::Kind::Weight);
    }
    CHECK(nhwc == 2);
    // conv -> bias -> relu -> conv: the second convolution reads an NHWC buffer; the average
    // pool reads NHWC too (channel last in its domain)
    CHECK(text.find("pointwise [2, 32, 32, 16]") != std::string::npos);
    check_fixture_by_interpreter(*g, "small_cnn", opts);
  }
}

TEST_CASE("channels-last lowering of a MobileNetV2-style net: 1x1 convolutions as GEMMs over NHWC, depthwise ones as pointwise taps", "[lower]") {
  const LowerOptions opts = backend_named("cuda").lower_options(true, CompileOptions{});
  for (const char* suffix : {".pt2", ".core.pt2"})
  for (bool dw_fastest : {false, true}) {
    INFO(std::string("mbv2_dyn") + suffix << ", depthwise weights [KH, KW, C]: " << dw_fastest);
    GraphPassOptions po = test::channels_last_options();
    po.depthwise_channels_fastest = dw_fastest;
    auto g = run_graph_passes(*load_pt2(test::fixture(std::string("mbv2_dyn") + suffix)), {}, po);
    loop::Program p = lower_to_loops(*g, opts);
    std::string text = loop::print_program(p);
    INFO(text);
    int convs = 0, gemms = 0, nhwc_gemms = 0;
    for (const auto& c : p.comps) {
      if (c.kind != loop::Computation::Kind::Extern) continue;
      convs += c.extern_kind == loop::ExternKind::Convolution;
      if (c.extern_kind != loop::ExternKind::Gemm) continue;
      ++gemms;
      // [N H W, C] x [C, O]: the activations' channel is contiguous, the KRSC weight read as W^T
      const loop::View& x = c.operands[0];
      const loop::View& w = c.operands[1];
      if (c.origin.rfind("conv", 0) == 0 && x.strides[1] == sym::Expr(1) && x.strides[0] == x.sizes[1] &&
          w.strides[0] == sym::Expr(1) && p.buffers[w.buffer].kind == loop::Buffer::Kind::Weight)
        ++nhwc_gemms;
    }
    CHECK(convs == 1);       // the 3x3 stem runs in cuDNN (NHWC)
    CHECK(gemms == 6);       // five 1x1 convolutions and the classifier
    CHECK(nhwc_gemms == 5);
    // The depthwise convolutions: pointwise over NHWC domains (channel last), reading the
    // expansion GEMM's result with the folded batch norm and ReLU6 in their loads.
    CHECK(text.find("pointwise [s77, 16, 16, 64]") != std::string::npos);
    CHECK(text.find("pointwise [s77, 8, 8, 64]") != std::string::npos);
    // Their [64, 1, 3, 3] weights: KRSC, or with consecutive channels adjacent (the CUDA backend's
    // choice), which the taps then read 4 at a time.
    int dw_weights = 0;
    for (const auto& b : p.buffers) {
      if (b.kind != loop::Buffer::Kind::Weight || b.sizes.size() != 4 || !(b.sizes[1] == sym::Expr(1)) || !(b.sizes[2] == sym::Expr(3)))
        continue;
      ++dw_weights;
      CHECK((b.strides[0] == sym::Expr(1)) == dw_fastest);
      if (dw_fastest) CHECK(b.strides[3] == b.sizes[0]);
    }
    CHECK(dw_weights >= 2);
    check_fixture_by_interpreter(*g, "mbv2_dyn", opts);
  }
}

TEST_CASE("a depthwise convolution (CUDA) stores an input that is costly to recompute per tap, and recomputes a cheap one", "[lower]") {
  std::mt19937 rng(11);
  for (OpKind act : {OpKind::Silu, OpKind::Relu}) {
    INFO((act == OpKind::Silu ? "silu" : "relu"));
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {sym::Expr(2), sym::Expr(8), sym::Expr(6), sym::Expr(6)});
    Value* w = b.input("w", DType::Float32, {sym::Expr(8), sym::Expr(1), sym::Expr(3), sym::Expr(3)});
    Value* a = b.op(act, "act", {{"self", x}});
    b.g->outputs.push_back(b.op(OpKind::Conv2d, "dw", {{"input", a}, {"weight", w}, {"padding", std::vector<int64_t>{1, 1}},
                                                      {"groups", int64_t(8)}}));
    const LowerOptions cuda = backend_named("cuda").lower_options(true, CompileOptions{});
    loop::Program p = lower_to_loops(*b.g, cuda);
    const std::string text = loop::print_program(p);
    INFO(text);
    int pointwise = 0;
    for (const auto& c : p.comps) pointwise += c.kind == loop::Computation::Kind::Pointwise;
    // silu: stored once, then the 9 taps read it; relu: recomputed by each tap, one kernel
    CHECK(pointwise == (act == OpKind::Silu ? 2 : 1));
    same_outputs(lower_to_loops(*b.g), p, *b.g, rng);
  }
}

TEST_CASE("lowering fuses pointwise chains and keeps views as index rewrites", "[lower]") {
  auto g = load_pt2(test::fixture("mlp.pt2"));
  loop::Program p = lower_to_loops(*g);
  std::string text = loop::print_program(p);
  INFO(text);
  int gemms = 0, pointwise = 0, reductions = 0;
  for (const auto& c : p.comps) {
    gemms += c.kind == loop::Computation::Kind::Extern;
    pointwise += c.kind == loop::Computation::Kind::Pointwise;
    reductions += c.kind == loop::Computation::Kind::Reduction;
  }
  CHECK(gemms == 2);
  CHECK(reductions == 2);  // layer-norm's mean and variance
  // bias + gelu compose into one pointwise buffer (the second GEMM's operand); bias + residual +
  // normalize + affine compose into the output; mean and rstd are one small pointwise each (the
  // scheduler, not lowering, fuses them with their reductions).
  CHECK(pointwise == 4);
  // The weight transposes are strided views of the weights, not copies.
  CHECK(text.find("p_l1_weight[256, 64]") == std::string::npos);
}

TEST_CASE("lowering names the node it cannot lower", "[lower]") {
  auto g = load_pt2(test::fixture("mlp.pt2"));
  // Turn gelu into an op the table knows but lowering does not (conv3d).
  for (const auto& n : g->nodes())
    if (n->kind == OpKind::Gelu) const_cast<Node*>(n.get())->kind = OpKind::Conv3d;
  try {
    lower_to_loops(*g);
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("node 'gelu' (aten::conv3d) at scripts/export_models.py:") != std::string::npos);
    CHECK(std::string(e.what()).find("cannot lower") != std::string::npos);
  }
}

TEST_CASE("convolutions as im2col columns times the weight (the CUDA lowering) match the convolution extern", "[lower]") {
  struct Conv {
    int64_t C, O, K, stride, pad, dil;
    bool bias;
  };
  const Conv convs[] = {{3, 4, 3, 1, 1, 1, true}, {2, 3, 3, 2, 1, 1, false}, {2, 3, 1, 1, 0, 1, true}, {2, 3, 1, 2, 0, 1, false},
                        {2, 2, 3, 1, 2, 2, true}, {1, 2, 2, 3, 0, 1, false}};
  std::mt19937 rng(3);
  for (const Conv& k : convs) {
    INFO("C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " pad " << k.pad << " dil " << k.dil);
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    Value* x = b.input("x", DType::Float32, {n, sym::Expr(k.C), sym::Expr(7), sym::Expr(6)});
    Value* w = b.input("w", DType::Float32, {sym::Expr(k.O), sym::Expr(k.C), sym::Expr(k.K), sym::Expr(k.K)});
    std::map<std::string, Arg> args{{"input", x}, {"weight", w}, {"stride", std::vector<sym::Expr>{sym::Expr(k.stride), sym::Expr(k.stride)}},
                                    {"padding", std::vector<sym::Expr>{sym::Expr(k.pad), sym::Expr(k.pad)}},
                                    {"dilation", std::vector<sym::Expr>{sym::Expr(k.dil), sym::Expr(k.dil)}}, {"groups", sym::Expr(1)}};
    args["bias"] = k.bias ? Arg{b.input("b", DType::Float32, {sym::Expr(k.O)})} : Arg{};
    b.g->outputs.push_back(b.op(OpKind::Conv2d, "y", args));
    LowerOptions gemm_opts;
    gemm_opts.conv_as_gemm = true;
    loop::Program direct = lower_to_loops(*b.g), as_gemm = lower_to_loops(*b.g, gemm_opts);
    bool has_conv = false;
    for (const auto& c : as_gemm.comps) has_conv = has_conv || (c.kind == loop::Computation::Kind::Extern && c.extern_kind == loop::ExternKind::Convolution);
    CHECK_FALSE(has_conv);
    for (int64_t batch : {1, 3}) {
      auto ins = random_inputs(*b.g, batch, rng);
      auto want = interpret(direct, *b.g, ins, {{"n", batch}});
      auto got = interpret(as_gemm, *b.g, ins, {{"n", batch}});
      REQUIRE(want[0].size() == got[0].size());
      std::vector<float> a = floats(want[0]), c = floats(got[0]);
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - c[i])));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("channels-last convolutions as GEMMs (1x1, patchify) and depthwise taps match the convolution extern", "[lower]") {
  struct Conv {
    int64_t C, O, K, stride, pad, dil, groups;
    loop::ExternKind kind;  // what the channels-last lowering runs (Gemm; Convolution = none: pointwise taps)
    bool pooled = false;    // the input is a keepdim amax over H, W: [N, C, 1, 1] with strides {C, 1, 0, 0}
  };
  // (the input is 8 x 12: the 3x3/s3 patchify leaves 2 rows unread, as the convolution does)
  const Conv convs[] = {{5, 3, 1, 1, 0, 1, 1, loop::ExternKind::Gemm},        {3, 4, 4, 4, 0, 1, 1, loop::ExternKind::Gemm},
                        {3, 4, 2, 2, 0, 1, 1, loop::ExternKind::Gemm},        {2, 5, 3, 3, 0, 1, 1, loop::ExternKind::Gemm},
                        {4, 4, 3, 1, 1, 1, 4, loop::ExternKind::Convolution}, {3, 6, 3, 2, 1, 1, 3, loop::ExternKind::Convolution},
                        {4, 4, 5, 1, 4, 2, 4, loop::ExternKind::Convolution}, {5, 3, 1, 1, 0, 1, 1, loop::ExternKind::Gemm, true}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> U(-1, 1);
  const LowerOptions cl = backend_named("cuda").lower_options(true, CompileOptions{});
  for (const Conv& k : convs) {
    INFO("C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " pad " << k.pad << " dil " << k.dil << " groups " << k.groups
              << (k.pooled ? " (pooled input)" : ""));
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    Value* x = b.input("x", DType::Float32, {n, sym::Expr(k.C), sym::Expr(8), sym::Expr(12)});
    if (k.pooled) x = b.op(OpKind::Amax, "pool", {{"self", x}, {"dim", std::vector<int64_t>{2, 3}}, {"keepdim", true}});
    std::vector<double> wv(static_cast<size_t>(k.O * (k.C / k.groups) * k.K * k.K)), bv(static_cast<size_t>(k.O));
    for (auto* v : {&wv, &bv})
      for (double& e : *v) e = U(rng);
    Value* w = b.weight("p_w", "w", DType::Float32, {k.O, k.C / k.groups, k.K, k.K}, wv);
    Value* bias = b.weight("p_b", "b", DType::Float32, {k.O}, bv);
    auto pair = [](int64_t v) { return std::vector<sym::Expr>{sym::Expr(v), sym::Expr(v)}; };
    Value* y = b.op(OpKind::Conv2d, "y",
                    {{"input", x}, {"weight", w}, {"bias", bias}, {"stride", pair(k.stride)}, {"padding", pair(k.pad)},
                     {"dilation", pair(k.dil)}, {"groups", sym::Expr(k.groups)}});
    b.g->outputs.push_back(y);
    auto g = run_graph_passes(*b.g, {}, test::channels_last_options());
    loop::Program direct = lower_to_loops(*b.g), nhwc = lower_to_loops(*g, cl);
    INFO(loop::print_program(nhwc));
    CHECK(count_externs(nhwc, loop::ExternKind::Convolution) == 0);
    CHECK(count_externs(nhwc, loop::ExternKind::Gemm) == (k.kind == loop::ExternKind::Gemm ? 1 : 0));
    for (int64_t batch : {1, 3}) {
      auto ins = random_inputs(*b.g, batch, rng);
      auto want = interpret(direct, *b.g, ins, {{"n", batch}});
      auto got = interpret(nhwc, *g, ins, {{"n", batch}});
      REQUIRE(want[0].size() == got[0].size());
      std::vector<float> a = floats(want[0]), c = floats(got[0]);
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - c[i])));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("an NCHW patchify convolution (CUDA) is a GEMM over its patches and matches the convolution extern", "[lower]") {
  struct Conv {
    int64_t C, O, KH, KW;
    bool gemm;  // stride = kernel, no padding: a GEMM; else the cuDNN extern
    int64_t pad = 0;
  };
  // (the input is 8 x 12: the 3x3/s3 patchify leaves 2 rows unread, as the convolution does)
  const Conv convs[] = {{3, 4, 4, 4, true}, {2, 5, 3, 3, true}, {1, 3, 2, 3, true}, {3, 4, 4, 4, false, 1}, {3, 4, 1, 1, false}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> U(-1, 1);
  const LowerOptions cuda = backend_named("cuda").lower_options(false, CompileOptions{});
  REQUIRE_FALSE(cuda.channels_last);
  for (const Conv& k : convs) {
    INFO("C " << k.C << " O " << k.O << " kernel " << k.KH << "x" << k.KW << " pad " << k.pad);
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    Value* x = b.input("x", DType::Float32, {n, sym::Expr(k.C), sym::Expr(8), sym::Expr(12)});
    std::vector<double> wv(static_cast<size_t>(k.O * k.C * k.KH * k.KW)), bv(static_cast<size_t>(k.O));
    for (auto* v : {&wv, &bv})
      for (double& e : *v) e = U(rng);
    Value* w = b.weight("p_w", "w", DType::Float32, {k.O, k.C, k.KH, k.KW}, wv);
    Value* bias = b.weight("p_b", "b", DType::Float32, {k.O}, bv);
    auto pair = [](int64_t u, int64_t v) { return std::vector<sym::Expr>{sym::Expr(u), sym::Expr(v)}; };
    Value* y = b.op(OpKind::Conv2d, "y",
                    {{"input", x}, {"weight", w}, {"bias", bias}, {"stride", pair(k.KH, k.KW)}, {"padding", pair(k.pad, k.pad)},
                     {"dilation", pair(1, 1)}, {"groups", sym::Expr(1)}});
    // what a ViT does next: [N, O, OH OW] -> [N, OH OW, O]
    Value* flat = b.op(OpKind::FlattenUsingInts, "flat", {{"self", y}, {"start_dim", int64_t{2}}, {"end_dim", int64_t{-1}}});
    b.g->outputs.push_back(b.op(OpKind::TransposeInt, "tokens", {{"self", flat}, {"dim0", int64_t{1}}, {"dim1", int64_t{2}}}));
    loop::Program direct = lower_to_loops(*b.g), got_prog = lower_to_loops(*b.g, cuda);
    INFO(loop::print_program(got_prog));
    CHECK(count_externs(got_prog, loop::ExternKind::Gemm) == (k.gemm ? 1 : 0));
    CHECK(count_externs(got_prog, loop::ExternKind::Convolution) == (k.gemm ? 0 : 1));
    same_outputs(direct, got_prog, *b.g, rng);
  }
}

TEST_CASE("a convolution's weight gradient as stored columns and GEMMs (CUDA) matches the implicit-GEMM extern (CPU)", "[lower]") {
  struct Conv {
    int64_t C, O, K, stride, pad, dil, groups;
  };
  const Conv convs[] = {{3, 4, 3, 1, 1, 1, 1}, {2, 3, 3, 2, 1, 1, 1}, {2, 3, 1, 2, 0, 1, 1},
                        {4, 6, 3, 1, 2, 2, 2}, {4, 4, 3, 2, 1, 1, 4}, {1, 2, 2, 3, 0, 1, 1}};
  std::mt19937 rng(5);
  for (const Conv& k : convs) {
    INFO("C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " pad " << k.pad << " dil " << k.dil << " groups "
              << k.groups);
    const int64_t H = 7, W = 6;
    const int64_t OH = (H + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1, OW = (W + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1;
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    Value* x = b.input("x", DType::Float32, {n, sym::Expr(k.C), sym::Expr(H), sym::Expr(W)});
    Value* dy = b.input("dy", DType::Float32, {n, sym::Expr(k.O), sym::Expr(OH), sym::Expr(OW)});
    auto two = [](int64_t v) { return std::vector<int64_t>{v, v}; };
    b.g->outputs.push_back(b.op(OpKind::PtcConv2dWeightGrad, "dw",
                                {{"input", x}, {"grad_output", dy}, {"kernel_size", two(k.K)}, {"stride", two(k.stride)},
                                 {"padding", two(k.pad)}, {"dilation", two(k.dil)}, {"groups", k.groups}}));
    LowerOptions gemm_opts;
    gemm_opts.conv_as_gemm = true;
    loop::Program direct = lower_to_loops(*b.g), as_gemm = lower_to_loops(*b.g, gemm_opts);
    auto count = [](const loop::Program& p) {
      int n = 0;
      for (const auto& c : p.comps) n += c.kind == loop::Computation::Kind::Extern && c.extern_kind == loop::ExternKind::ConvWeightGrad;
      return n;
    };
    CHECK(count(direct) == 1);
    CHECK(count(as_gemm) == 0);
    same_outputs(direct, as_gemm, *b.g, rng, static_cast<size_t>(k.O * (k.C / k.groups) * k.K * k.K * 4));
  }
}

TEST_CASE("argmax and argmin take the first NaN, as torch", "[lower]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {sym::Expr(3), sym::Expr(4)});
  b.g->outputs.push_back(b.op(OpKind::Argmax, "am", {{"self", x}, {"dim", int64_t(1)}}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v{1, 5, 5, 2, 3, nan, 9, nan, -1, -2, -3, -4};
  std::vector<std::byte> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  auto out = interpret(lower_to_loops(*b.g), *b.g, {bytes}, {});
  std::vector<int64_t> got(3);
  std::memcpy(got.data(), out.at(0).data(), 24);
  CHECK(got == std::vector<int64_t>{1, 1, 0});
}

TEST_CASE("a GEMM operand that is a computed tensor transposed is stored in its own order", "[lower]") {
  // dW = h^T dy with h = relu(x) computed for this GEMM alone (a weight gradient reading a
  // recomputed activation): h is stored [8, 5] as computed and read through swapped strides, not
  // stored as [5, 8] with reads along the columns of x.
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {sym::Expr(8), sym::Expr(5)});
  Value* dy = b.input("dy", DType::Float32, {sym::Expr(8), sym::Expr(3)});
  Value* h = b.op(OpKind::Relu, "h", {{"self", x}});
  Value* ht = b.op(OpKind::T, "ht", {{"self", h}});
  b.g->outputs.push_back(b.op(OpKind::Mm, "dw", {{"self", ht}, {"mat2", dy}}));
  REQUIRE(verify_graph(*b.g).empty());
  loop::Program p = lower_to_loops(*b.g);
  INFO(loop::print_program(p));
  int pointwise = 0;
  for (const auto& c : p.comps) {
    if (c.kind == loop::Computation::Kind::Pointwise) {
      ++pointwise;
      CHECK(p.buffers[c.out].sizes == std::vector<sym::Expr>{sym::Expr(8), sym::Expr(5)});
    }
    if (c.kind == loop::Computation::Kind::Extern) {
      REQUIRE(c.operands.size() == 2);
      CHECK(c.operands[0].strides == std::vector<sym::Expr>{sym::Expr(1), sym::Expr(5)});
    }
  }
  CHECK(pointwise == 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<float> xv(40), dv(24);
  for (auto& v : xv) v = U(rng);
  for (auto& v : dv) v = U(rng);
  std::vector<std::byte> xb(160), db(96);
  std::memcpy(xb.data(), xv.data(), 160);
  std::memcpy(db.data(), dv.data(), 96);
  auto out = floats(interpret(p, *b.g, {xb, db}, {})[0]);
  REQUIRE(out.size() == 15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      double want = 0;
      for (int k = 0; k < 8; ++k) want += std::max(xv[k * 5 + i], 0.f) * dv[k * 3 + j];
      CHECK(out[i * 3 + j] == Approx(want).margin(1e-5));
    }
}

TEST_CASE("pow by a constant exponent lowers to products and roots, other exponents to pow", "[lower]") {
  // GPT-2's tanh GELU computes x ** 3 (and its gradient x ** 2): as std::pow they neither vectorize
  // nor cost less than a division.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs{-3, -1.5f, -0.f, 0, 0.25f, 1, 2.5f, 7, 1e10f, inf, -inf, nan};
  std::vector<std::byte> xb(xs.size() * 4);
  std::memcpy(xb.data(), xs.data(), xb.size());
  for (double e : {1.0, 2.0, 3.0, 4.0, 0.5, -0.5, -1.0, -2.0, 1.5, -3.0, 0.0}) {
    INFO("exponent " << e);
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {sym::Expr(static_cast<int64_t>(xs.size()))});
    b.g->outputs.push_back(b.op(OpKind::PowTensorScalar, "p", {{"self", x}, {"exponent", e}}));
    loop::Program p = lower_to_loops(*b.g);
    const std::string text = loop::print_program(p);
    INFO(text);
    const bool special = e == 1 || e == 2 || e == 3 || e == 4 || e == 0.5 || e == -0.5 || e == -1 || e == -2;
    CHECK((text.find("pow(") == std::string::npos) == special);
    auto out = floats(interpret(p, *b.g, {xb}, {})[0]);
    REQUIRE(out.size() == xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      // torch's values: its square-root forms give sqrt(-inf) = nan and 1 / sqrt(-0) = -inf
      // where std::pow gives inf and inf.
      const float want = e == 0.5 ? std::sqrt(xs[i]) : e == -0.5 ? 1 / std::sqrt(xs[i]) : std::pow(xs[i], static_cast<float>(e));
      INFO("x = " << xs[i] << ": " << out[i] << " vs " << want);
      if (std::isnan(want)) CHECK(std::isnan(out[i]));
      else if (std::isinf(want) || want == 0) CHECK(out[i] == want);
      else CHECK(out[i] == Approx(want).epsilon(1e-6));
    }
  }
}

TEST_CASE("the cuDNN lowering of convolutions and their gradients (CUDA) matches the CPU lowering", "[lower]") {
  struct Conv {
    int64_t C, O, K, stride, pad, dil, groups;
  };
  const Conv convs[] = {{3, 4, 3, 1, 1, 1, 1}, {2, 3, 3, 2, 1, 1, 1}, {2, 3, 1, 2, 0, 1, 1},
                        {4, 6, 3, 1, 2, 2, 2}, {4, 4, 3, 2, 1, 1, 4}, {1, 2, 2, 3, 0, 1, 1}};
  std::mt19937 rng(7);
  const OpKind ops[] = {OpKind::Conv2d, OpKind::PtcConv2dWeightGrad, OpKind::PtcConv2dInputGrad};
  const loop::ExternKind kinds[] = {loop::ExternKind::Convolution, loop::ExternKind::ConvWeightGrad, loop::ExternKind::ConvInputGrad};
  for (const Conv& k : convs)
    for (int op = 0; op < 3; ++op) {
      INFO("op " << op << " C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " pad " << k.pad << " dil " << k.dil
                 << " groups " << k.groups);
      const int64_t H = 7, W = 6;
      const int64_t OH = (H + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1, OW = (W + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1;
      test::GraphBuilder b;
      sym::Expr n = b.sym("n", 1, 4);
      auto two = [](int64_t v) { return std::vector<int64_t>{v, v}; };
      std::map<std::string, Arg> args{{"stride", two(k.stride)}, {"padding", two(k.pad)}, {"dilation", two(k.dil)}, {"groups", k.groups}};
      auto weight = [&] { return b.input("w", DType::Float32, {sym::Expr(k.O), sym::Expr(k.C / k.groups), sym::Expr(k.K), sym::Expr(k.K)}); };
      auto x = [&] { return b.input("x", DType::Float32, {n, sym::Expr(k.C), sym::Expr(H), sym::Expr(W)}); };
      auto dy = [&] { return b.input("dy", DType::Float32, {n, sym::Expr(k.O), sym::Expr(OH), sym::Expr(OW)}); };
      if (op == 0) {
        args["input"] = x(), args["weight"] = weight();
        args["bias"] = Arg{b.input("b", DType::Float32, {sym::Expr(k.O)})};
      } else if (op == 1) {
        args["input"] = x(), args["grad_output"] = dy(), args["kernel_size"] = two(k.K);
      } else {
        args["grad_output"] = dy(), args["weight"] = weight();
        args["input_size"] = std::vector<sym::Expr>{n, sym::Expr(k.C), sym::Expr(H), sym::Expr(W)};
      }
      b.g->outputs.push_back(b.op(ops[op], "out", args));
      LowerOptions dnn;
      dnn.cudnn_conv = true;
      loop::Program cpu = lower_to_loops(*b.g), cuda = lower_to_loops(*b.g, dnn);
      int externs = 0;
      for (const auto& c : cuda.comps) externs += c.kind == loop::Computation::Kind::Extern && c.extern_kind == kinds[op];
      CHECK(externs == 1);
      same_outputs(cpu, cuda, *b.g, rng);
    }
}

TEST_CASE("attention stored heads-inner (CUDA) matches and its heads merge back as a view", "[lower]") {
  // y = sdpa(q, k, v).transpose(1, 2).view(n, T, H * Dv), as a transformer merges its heads.
  std::mt19937 rng(5);
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant << " (0 plain, 1 causal, 2 float mask)");
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    const int64_t H = 3, T = 5, D = 4, Dv = 6;
    auto e = [](int64_t v) { return sym::Expr(v); };
    std::map<std::string, Arg> args{{"query", b.input("q", DType::Float32, {n, e(H), e(T), e(D)})},
                                    {"key", b.input("k", DType::Float32, {n, e(H), e(T), e(D)})},
                                    {"value", b.input("v", DType::Float32, {n, e(H), e(T), e(Dv)})}};
    if (variant == 1) args["is_causal"] = true;
    if (variant == 2) args["attn_mask"] = Arg{b.input("mask", DType::Float32, {e(T), e(T)})};
    Value* y = b.op(OpKind::ScaledDotProductAttention, "y", args);
    Value* t = b.op(OpKind::TransposeInt, "t", {{"self", y}, {"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
    b.g->outputs.push_back(b.op(OpKind::View, "merged", {{"self", t}, {"size", std::vector<sym::Expr>{n, e(T), e(H * Dv)}}}));
    LowerOptions plain, inner;
    inner.attention_heads_inner = true;
    loop::Program want = lower_to_loops(*b.g, plain), got = lower_to_loops(*b.g, inner);
    REQUIRE(got.comps.size() == 1);  // the attention extern writes the output: no copy
    CHECK(got.comps[0].extern_kind == loop::ExternKind::Attention);
    CHECK(got.comps[0].as<loop::AttentionAttrs>().heads_inner);
    CHECK(want.comps.size() == 2);  // the heads merged by a copy
    same_outputs(want, got, *b.g, rng);
  }
}

TEST_CASE("a symbolic size in a Tensor slot (x / t.numel(), as torch.export writes it) is a wrapped 0-d tensor", "[lower]") {
  test::GraphBuilder b;
  sym::Expr n = b.sym("n", 1, 8), m = b.sym("m", 1, 8);
  Value* x = b.input("x", DType::Float32, {n, sym::Expr(3)});
  b.input("t", DType::Float32, {m, sym::Expr(2)});
  Value* d = b.op(OpKind::DivTensor, "div", {{"self", x}, {"other", m * sym::Expr(2)}});
  b.g->outputs.push_back(b.op(OpKind::MulTensor, "mul", {{"self", d}, {"other", n}}));
  CHECK(verify_graph(*b.g).empty());
  loop::Program p = lower_to_loops(*b.g);
  std::mt19937 rng(11);
  for (auto [nv, mv] : {std::pair<int64_t, int64_t>{1, 3}, {4, 2}, {7, 5}}) {
    auto ins = random_inputs(*b.g, 1, rng);
    std::vector<float> xs(static_cast<size_t>(nv * 3));
    for (auto& v : xs) v = std::uniform_real_distribution<float>(-2, 2)(rng);
    ins[0].assign(reinterpret_cast<const std::byte*>(xs.data()), reinterpret_cast<const std::byte*>(xs.data() + xs.size()));
    ins[1].assign(static_cast<size_t>(mv * 2 * 4), std::byte{0});
    auto out = floats(interpret(p, *b.g, ins, {{"n", nv}, {"m", mv}})[0]);
    REQUIRE(out.size() == xs.size());
    for (size_t i = 0; i < xs.size(); ++i) CHECK(out[i] == Approx(xs[i] / static_cast<float>(2 * mv) * static_cast<float>(nv)).epsilon(1e-6));
  }
}

TEST_CASE("clamp with tensor bounds and where over two numbers (T5's float16 overflow guard) lower", "[lower]") {
  // hidden = clamp(hidden, min=-c, max=c) with c = where(isinf(hidden).any(), 64504 - 1000, 65504)
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {sym::Expr(2), sym::Expr(3)});
  Value* cond = b.input("cond", DType::Bool, {});
  Value* c = b.op(OpKind::WhereScalar, "c", {{"condition", cond}, {"self", 2.0}, {"other", 1.5}});
  Value* lo = b.op(OpKind::Neg, "lo", {{"self", c}});
  b.g->outputs.push_back(b.op(OpKind::ClampTensor, "clamped", {{"self", x}, {"min", lo}, {"max", c}}));
  CHECK(verify_graph(*b.g).empty());
  loop::Program p = lower_to_loops(*b.g);
  std::vector<float> xs{-3, -1.75f, 0, 1.75f, 2.5f, -0.5f};
  std::vector<std::byte> xb(xs.size() * 4);
  std::memcpy(xb.data(), xs.data(), xb.size());
  for (bool on : {true, false}) {
    auto out = floats(interpret(p, *b.g, {xb, {std::byte{on ? uint8_t(1) : uint8_t(0)}}}, {})[0]);
    const float bound = on ? 2.0f : 1.5f;
    REQUIRE(out.size() == xs.size());
    for (size_t i = 0; i < xs.size(); ++i) CHECK(out[i] == std::min(std::max(xs[i], -bound), bound));
  }
}

TEST_CASE("a float16 mean sums in float32 (a half sum would overflow where the mean does not)", "[lower][half]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float16, {sym::Expr(1), sym::Expr(4)});
  b.g->outputs.push_back(b.op(OpKind::MeanDim, "m", {{"self", x}, {"dim", std::vector<int64_t>{1}}, {"keepdim", false}}));
  REQUIRE(verify_graph(*b.g).empty());
  std::vector<std::byte> xb(8);
  for (int i = 0; i < 4; ++i) write_element(xb.data() + 2 * i, DType::Float16, 30000.0);  // sum 120000 > 65504
  auto out = interpret(lower_to_loops(*b.g), *b.g, {xb}, {});
  REQUIRE(out.at(0).size() == 2);
  CHECK(read_element(out[0].data(), DType::Float16) == 30000.0);
}

TEST_CASE("channels-last lowering of a float16 CNN: KRSC float32 weights, NHWC convolutions", "[lower][half]") {
  const LowerOptions opts = backend_named("cuda").lower_options(true, CompileOptions{});
  auto g = run_graph_passes(*load_pt2(test::fixture("small_cnn_f16.pt2")), {}, test::channels_last_options());
  loop::Program p = lower_to_loops(*g, opts);
  INFO(loop::print_program(p));
  int nhwc = 0;
  for (const auto& c : p.comps) {
    if (c.kind != loop::Computation::Kind::Extern || c.extern_kind != loop::ExternKind::Convolution) continue;
    nhwc += c.as<loop::ConvAttrs>().nhwc;
    CHECK(c.operands[1].channels_last());
    CHECK(!c.operands[1].dense());
    CHECK(p.buffers[c.operands[1].buffer].kind == loop::Buffer::Kind::Weight);
    CHECK(p.buffers[c.operands[1].buffer].dtype == DType::Float32);
  }
  CHECK(nhwc == 2);
}

TEST_CASE("max pooling's gradient from its own indices is one MaxPoolGrad extern (CPU) that matches the gather", "[lower]") {
  // max_pool2d_with_indices_backward(dy, x, .., indices) with the indices of
  // max_pool2d_with_indices(x, same geometry): found again from x (the indices and the maxima
  // are not computed). Indices of another geometry, or from elsewhere, keep the gather.
  struct Geo {
    int64_t K, s, p, d;
  };
  const Geo geos[] = {{3, 2, 1, 1}, {2, 2, 0, 1}, {3, 1, 1, 2}, {3, 3, 1, 1}};
  std::mt19937 rng(3);
  auto ints = [](int64_t v) { return std::vector<int64_t>{v, v}; };
  for (const Geo& g : geos)
    for (int source = 0; source < 3; ++source) {  // 0: the same pool; 1: another input's pool; 2: an input
      INFO("K " << g.K << " s " << g.s << " p " << g.p << " d " << g.d << ", indices source " << source);
      const int64_t C = 3, H = 9, W = 8;
      const int64_t OH = (H + 2 * g.p - g.d * (g.K - 1) - 1) / g.s + 1, OW = (W + 2 * g.p - g.d * (g.K - 1) - 1) / g.s + 1;
      test::GraphBuilder b;
      sym::Expr n = b.sym("n", 1, 4);
      Value* x = b.input("x", DType::Float32, {n, sym::Expr(C), sym::Expr(H), sym::Expr(W)});
      Value* dy = b.input("dy", DType::Float32, {n, sym::Expr(C), sym::Expr(OH), sym::Expr(OW)});
      std::map<std::string, Arg> geo{{"kernel_size", ints(g.K)}, {"stride", ints(g.s)}, {"padding", ints(g.p)}, {"dilation", ints(g.d)}};
      Value* indices = nullptr;
      if (source == 2) {
        indices = b.input("ix", DType::Int64, {n, sym::Expr(C), sym::Expr(OH), sym::Expr(OW)});
      } else {
        std::map<std::string, Arg> pa = geo;
        pa["self"] = source == 0 ? x : b.input("x2", DType::Float32, {n, sym::Expr(C), sym::Expr(H), sym::Expr(W)});
        indices = b.node(OpKind::MaxPool2dWithIndices, "mp", pa)[1];
      }
      std::map<std::string, Arg> ba = geo;
      ba["grad_output"] = dy, ba["self"] = x, ba["indices"] = indices, ba["ceil_mode"] = false;
      b.g->outputs.push_back(b.op(OpKind::MaxPool2dWithIndicesBackward, "bw", ba));
      LowerOptions on;
      on.max_pool_grad_extern = true;
      loop::Program gather = lower_to_loops(*b.g), direct = lower_to_loops(*b.g, on);
      int externs = 0;
      for (const auto& c : direct.comps) externs += c.kind == loop::Computation::Kind::Extern && c.extern_kind == loop::ExternKind::MaxPoolGrad;
      CHECK(externs == (source == 0 ? 1 : 0));
      if (source == 0) CHECK(direct.comps.size() == 1);  // no indices, no maxima
      if (source != 2) same_outputs(gather, direct, *b.g, rng);
    }
}

TEST_CASE("max pooling's gradient keeps the gather when the indices' pool differs in geometry or uses ceil_mode", "[lower]") {
  // 8x8 inputs: 3x3/2 pad 1 and 2x2/2 both give 4x4 windows, with or without ceil_mode.
  std::mt19937 rng(4);
  auto ints = [](int64_t a, int64_t b) { return std::vector<int64_t>{a, b}; };
  for (int variant = 0; variant < 3; ++variant) {  // 0: another kernel; 1: another dilation; 2: ceil_mode
    INFO("variant " << variant);
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    Value* x = b.input("x", DType::Float32, {n, sym::Expr(2), sym::Expr(8), sym::Expr(8)});
    Value* dy = b.input("dy", DType::Float32, {n, sym::Expr(2), sym::Expr(4), sym::Expr(4)});
    std::map<std::string, Arg> bw{{"kernel_size", ints(2, 2)}, {"stride", ints(2, 2)}, {"padding", ints(0, 0)}, {"dilation", ints(1, 1)}};
    std::map<std::string, Arg> pool = bw;
    if (variant == 0) pool = {{"kernel_size", ints(3, 3)}, {"stride", ints(2, 2)}, {"padding", ints(1, 1)}};
    if (variant == 1) pool["dilation"] = ints(1, 2), pool["padding"] = ints(0, 1);  // W: (8 + 2 - 2 - 1) / 2 + 1 = 4
    if (variant == 2) pool["ceil_mode"] = true, bw["ceil_mode"] = true;
    pool["self"] = x;
    Value* indices = b.node(OpKind::MaxPool2dWithIndices, "mp", pool)[1];
    REQUIRE(indices->type.sizes[2] == sym::Expr(4));
    REQUIRE(indices->type.sizes[3] == sym::Expr(4));
    bw["grad_output"] = dy, bw["self"] = x, bw["indices"] = indices;
    if (!bw.count("ceil_mode")) bw["ceil_mode"] = false;
    b.g->outputs.push_back(b.op(OpKind::MaxPool2dWithIndicesBackward, "bw", bw));
    LowerOptions on;
    on.max_pool_grad_extern = true;
    loop::Program gather = lower_to_loops(*b.g), direct = lower_to_loops(*b.g, on);
    for (const auto& c : direct.comps) CHECK_FALSE((c.kind == loop::Computation::Kind::Extern && c.extern_kind == loop::ExternKind::MaxPoolGrad));
    same_outputs(gather, direct, *b.g, rng);
  }
}

TEST_CASE("arg-reductions without ReduceOp::ArgMax (the CUDA lowering) give the ArgMax answers: ties, NaN, infinities", "[lower]") {
  // x [3, 5]: ties (first position wins), a NaN (its position wins), all -inf.
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {sym::Expr(3), sym::Expr(5)});
  Value* amax = b.op(OpKind::Argmax, "amax", {{"self", x}, {"dim", int64_t(1)}});
  Value* amin = b.op(OpKind::Argmin, "amin", {{"self", x}, {"dim", int64_t(0)}, {"keepdim", true}});
  Value* flat = b.op(OpKind::Argmax, "flat", {{"self", x}});
  std::vector<Value*> mx = b.node(OpKind::MaxDim, "mx", {{"self", x}, {"dim", int64_t(1)}});
  b.g->outputs = {amax, amin, flat, mx[0], mx[1]};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> data{1, 3, 3, 0, 3, 2, nan, 5, nan, -1, -inf, -inf, -inf, -inf, -inf};
  std::vector<std::byte> bytes(data.size() * 4);
  std::memcpy(bytes.data(), data.data(), bytes.size());
  LowerOptions two;
  two.arg_reductions = false;
  auto with = interpret(lower_to_loops(*b.g), *b.g, {bytes}, {});
  auto without = interpret(lower_to_loops(*b.g, two), *b.g, {bytes}, {});
  REQUIRE(with.size() == 5);
  REQUIRE(without.size() == 5);
  auto ints = [](const std::vector<std::byte>& v) {
    std::vector<int64_t> out(v.size() / 8);
    std::memcpy(out.data(), v.data(), v.size());
    return out;
  };
  CHECK(ints(with[0]) == std::vector<int64_t>{1, 1, 0});   // ties: the first; a NaN; all -inf: the first
  CHECK(ints(without[0]) == ints(with[0]));
  CHECK(ints(with[1]) == std::vector<int64_t>{2, 1, 2, 1, 2});  // a NaN wins argmin too
  CHECK(ints(without[1]) == ints(with[1]));
  CHECK(ints(with[2]) == std::vector<int64_t>{6});          // the first NaN of the flattened tensor
  CHECK(ints(without[2]) == ints(with[2]));
  CHECK(ints(without[4]) == ints(with[4]));
  CHECK(std::memcmp(without[3].data(), with[3].data(), with[3].size()) == 0);
}

TEST_CASE("loop::substitute moves load indices and index values, and shares what does not move", "[lower]") {
  const sym::Expr x0 = loop::loop_var(0, sym::Expr(8)), x1 = loop::loop_var(1, sym::Expr(16));
  const loop::ExprRef fixed = loop::load(1, DType::Float32, x1);               // a weight along x1 only
  const loop::ExprRef moving = loop::load(0, DType::Float32, x0 * 16 + x1 - 16);  // the row above
  const loop::ExprRef guard = loop::binary(loop::Op::Ge, loop::index_value(x0 - 1), loop::constant(0, DType::Int64));
  const loop::ExprRef body =
      loop::where(guard, loop::binary(loop::Op::Mul, moving, fixed), loop::constant(0, DType::Float32));
  std::map<const loop::Expr*, loop::ExprRef> memo;
  const loop::ExprRef moved = loop::substitute(body, {{x0, x0 + 1}}, &memo);
  REQUIRE(moved != body);
  CHECK(memo.at(fixed.get()) == fixed);  // untouched nodes are shared
  CHECK(memo.at(moving.get())->index == x0 * 16 + x1);
  CHECK(memo.at(guard->args[0].get())->index == x0);
  CHECK(memo.at(body.get()) == moved);
  // nothing to replace: the expression itself
  CHECK(loop::substitute(body, {{loop::loop_var(2, sym::Expr(4)), sym::Expr(0)}}) == body);
}

TEST_CASE("an attention mask that provably keeps every key (arange >= 0, a BERT export's) is dropped, one that may not is kept", "[lower]") {
  // mask = (arange(T) >= c)[None, None, :, None].expand(n, 1, T, T), read by two attentions, as
  // transformers' BERT builds it: with c = 0 it keeps every position, and the lowered program
  // has two attentions without a mask and no stored mask; with c = 1 row 0 keeps no key.
  std::mt19937 rng(7);
  for (int64_t c : {0, 1}) {
    INFO("mask arange >= " << c);
    auto build = [&](bool with_mask) {
      test::GraphBuilder b;
      sym::Expr n = b.sym("n", 1, 4), T(12);
      const int64_t H = 2, D = 8;
      Value* q = b.input("q", DType::Float32, {n, sym::Expr(H), T, sym::Expr(D)});
      Value* k = b.input("k", DType::Float32, {n, sym::Expr(H), T, sym::Expr(D)});
      Value* v = b.input("v", DType::Float32, {n, sym::Expr(H), T, sym::Expr(D)});
      std::map<std::string, Arg> args{{"query", q}, {"key", k}, {"value", v}};
      if (with_mask) {
        Value* r = b.op(OpKind::ArangeDefault, "arange", {{"end", T}});
        Value* u = b.op(OpKind::Unsqueeze, "u0", {{"self", r}, {"dim", int64_t(0)}});
        u = b.op(OpKind::Unsqueeze, "u1", {{"self", u}, {"dim", int64_t(1)}});
        u = b.op(OpKind::Unsqueeze, "u3", {{"self", u}, {"dim", int64_t(3)}});
        Value* ge = b.op(OpKind::GeScalar, "ge", {{"self", u}, {"other", c}});
        args["attn_mask"] = Arg{b.op(OpKind::Expand, "mask", {{"self", ge}, {"size", std::vector<sym::Expr>{n, sym::Expr(-1), T, T}}})};
      }
      Value* y = b.op(OpKind::ScaledDotProductAttention, "y", args);
      args["query"] = y;
      b.g->outputs.push_back(b.op(OpKind::ScaledDotProductAttention, "y2", args));
      REQUIRE(verify_graph(*b.g).empty());
      return b;
    };
    test::GraphBuilder masked = build(true), plain = build(false);
    LowerOptions opts;
    opts.fused_attention = true;
    loop::Program got = lower_to_loops(*masked.g, opts), want = lower_to_loops(*plain.g, opts);
    REQUIRE(count_externs(got, loop::ExternKind::Attention) == 2);
    int with_mask = 0;
    for (const auto& comp : got.comps)
      if (comp.extern_kind == loop::ExternKind::Attention) with_mask += comp.as<loop::AttentionAttrs>().mask_kind != 0;
    if (c == 0) {
      CHECK(with_mask == 0);
      CHECK(got.comps.size() == want.comps.size());
      same_outputs(want, got, *masked.g, rng);
    } else {
      CHECK(with_mask == 2);
      CHECK(got.comps.size() == want.comps.size() + 1);  // the stored mask
    }
  }
}

TEST_CASE("a causal mask computed from aranges of positions (transformers' GPT-2 export) becomes the attention's causal flag", "[lower]") {
  // pos = arange(T).expand(n, T); keep = pos[b, j] <= pos[b, i] and seg[b, i] == seg[b, j], with
  // seg = cumsum(pos != pos) (all zeros), b, i, j aranges: the mask is j <= i, which lowers to a
  // causal attention that reads no mask and matches is_causal=True; no cumsum is computed.
  std::mt19937 rng(9);
  const int64_t H = 2, D = 8;
  const sym::Expr T(12);
  auto build = [&](bool mask_from_positions) {
    test::GraphBuilder b;
    sym::Expr n = b.sym("n", 1, 4);
    auto e = [](int64_t v) { return sym::Expr(v); };
    Value* q = b.input("q", DType::Float32, {n, e(H), T, e(D)});
    Value* k = b.input("k", DType::Float32, {n, e(H), T, e(D)});
    Value* v = b.input("v", DType::Float32, {n, e(H), T, e(D)});
    std::map<std::string, Arg> args{{"query", q}, {"key", k}, {"value", v}};
    if (mask_from_positions) {
      auto unsq = [&](Value* x, std::vector<int64_t> dims, const std::string& name) {
        for (int64_t d : dims) x = b.op(OpKind::Unsqueeze, name + std::to_string(d), {{"self", x}, {"dim", d}});
        return x;
      };
      Value* pos = b.op(OpKind::Expand, "pos", {{"self", unsq(b.op(OpKind::ArangeDefault, "p", {{"end", T}}), {0}, "pu")},
                                               {"size", std::vector<sym::Expr>{n, T}}});
      Value* bi = unsq(b.op(OpKind::ArangeDefault, "bi", {{"end", n}}), {1, 2, 3}, "bu");
      Value* qi = unsq(b.op(OpKind::ArangeDefault, "qi", {{"end", T}}), {0, 1, 3}, "qu");
      Value* kj = unsq(b.op(OpKind::ArangeDefault, "kj", {{"end", T}}), {0, 1, 2}, "ku");
      auto index = [&](Value* x, Value* at, const std::string& name) {
        return b.op(OpKind::IndexTensor, name, {{"self", x}, {"indices", std::vector<Value*>{bi, at}}});
      };
      Value* causal = b.op(OpKind::LeTensor, "le", {{"self", index(pos, kj, "pk")}, {"other", index(pos, qi, "pq")}});
      Value* seg = b.op(OpKind::Cumsum, "seg", {{"self", b.op(OpKind::NeTensor, "ne", {{"self", pos}, {"other", pos}})}, {"dim", int64_t(-1)}});
      Value* same = b.op(OpKind::EqTensor, "eq", {{"self", index(seg, qi, "sq")}, {"other", index(seg, kj, "sk")}});
      args["attn_mask"] = Arg{b.op(OpKind::UnderscoreAndTensor, "keep", {{"self", causal}, {"other", same}})};
    } else {
      args["is_causal"] = true;
    }
    b.g->outputs.push_back(b.op(OpKind::ScaledDotProductAttention, "y", args));
    REQUIRE(verify_graph(*b.g).empty());
    return b;
  };
  test::GraphBuilder masked = build(true), causal = build(false);
  loop::Program got = lower_to_loops(*masked.g), want = lower_to_loops(*causal.g);
  REQUIRE(got.comps.size() == 1);
  REQUIRE(got.comps[0].extern_kind == loop::ExternKind::Attention);
  CHECK(got.comps[0].as<loop::AttentionAttrs>().causal);
  CHECK(got.comps[0].as<loop::AttentionAttrs>().mask_kind == 0);
  same_outputs(want, got, *masked.g, rng);
}

TEST_CASE("k and v with repeated heads (transformers' repeat_kv) lower to grouped-query attention without the copies", "[lower]") {
  // k, v: [n, 2, T, D] -> [:, :, None].expand(n, 2, 4, T, D).reshape(n, 8, T, D), as Llama's
  // repeat_kv writes grouped-query attention; k also goes through a pointwise op after the repeat.
  std::mt19937 rng(13);
  test::GraphBuilder b;
  sym::Expr n = b.sym("n", 1, 4);
  auto e = [](int64_t v) { return sym::Expr(v); };
  const int64_t T = 9, D = 8;
  Value* q = b.input("q", DType::Float32, {n, e(8), e(T), e(D)});
  auto repeat = [&](Value* x, const std::string& name) {
    Value* u = b.op(OpKind::Unsqueeze, name + "_u", {{"self", x}, {"dim", int64_t(2)}});
    Value* ex = b.op(OpKind::Expand, name + "_e", {{"self", u}, {"size", std::vector<sym::Expr>{n, e(2), e(4), e(T), e(D)}}});
    return b.op(OpKind::Reshape, name + "_r", {{"self", ex}, {"shape", std::vector<sym::Expr>{n, e(8), e(T), e(D)}}});
  };
  Value* k = b.op(OpKind::MulScalar, "k_scaled", {{"self", repeat(b.input("k", DType::Float32, {n, e(2), e(T), e(D)}), "k")}, {"other", 0.5}});
  Value* v = repeat(b.input("v", DType::Float32, {n, e(2), e(T), e(D)}), "v");
  b.g->outputs.push_back(b.op(OpKind::ScaledDotProductAttention, "y", {{"query", q}, {"key", k}, {"value", v}, {"is_causal", true}}));
  REQUIRE(verify_graph(*b.g).empty());
  LowerOptions fused, unfused;
  unfused.fused_attention = false;
  loop::Program got = lower_to_loops(*b.g, fused), want = lower_to_loops(*b.g, unfused);
  REQUIRE(count_externs(got, loop::ExternKind::Attention) == 1);
  for (const auto& c : got.comps) {
    if (c.extern_kind == loop::ExternKind::Attention) CHECK(c.as<loop::AttentionAttrs>().kv_group == 4);
    else CHECK(c.domain[1] == e(2));  // k and v stored with their 2 heads, not 8
  }
  same_outputs(want, got, *b.g, rng);
}

TEST_CASE("a cumsum along a long dim lowers in blocks (sub-quadratic) and matches the running sum", "[lower]") {
  // x: [2, L] with L a symbol up to 500 (blocks of 23): lengths shorter than a block, a multiple
  // of it, and ragged; float32 and int64.
  for (DType dt : {DType::Float32, DType::Int64}) {
    test::GraphBuilder b;
    sym::Expr len = b.sym("L", 1, 500);
    Value* x = b.input("x", dt, {sym::Expr(2), len});
    b.g->outputs.push_back(b.op(OpKind::Cumsum, "cs", {{"self", x}, {"dim", int64_t(1)}}));
    REQUIRE(verify_graph(*b.g).empty());
    loop::Program p = lower_to_loops(*b.g);
    CHECK(p.comps.size() >= 3);  // block sums, sums before each block, sums within blocks
    std::mt19937 rng(17);
    for (int64_t L : {1, 5, 23, 46, 100, 500}) {
      INFO("L " << L << (dt == DType::Int64 ? " int64" : " float32"));
      std::vector<std::byte> in(static_cast<size_t>(2 * L) * 8);
      std::vector<double> xs(static_cast<size_t>(2 * L));
      for (size_t i = 0; i < xs.size(); ++i) {
        xs[i] = static_cast<double>(static_cast<int>(rng() % 21) - 10);
        if (dt == DType::Int64) {
          const int64_t v = static_cast<int64_t>(xs[i]);
          std::memcpy(in.data() + 8 * i, &v, 8);
        } else {
          const float v = static_cast<float>(xs[i]);
          std::memcpy(in.data() + 4 * i, &v, 4);
        }
      }
      if (dt == DType::Float32) in.resize(xs.size() * 4);
      auto out = interpret(p, *b.g, {in}, {{"L", L}})[0];
      for (int64_t r = 0; r < 2; ++r) {
        double run = 0;
        for (int64_t j = 0; j < L; ++j) {
          run += xs[static_cast<size_t>(r * L + j)];
          const size_t k = static_cast<size_t>(r * L + j);
          double got;
          if (dt == DType::Int64) {
            int64_t v;
            std::memcpy(&v, out.data() + 8 * k, 8);
            got = static_cast<double>(v);
          } else {
            float v;
            std::memcpy(&v, out.data() + 4 * k, 4);
            got = v;
          }
          REQUIRE(got == run);  // small integers: exact in either dtype
        }
      }
    }
  }
}
