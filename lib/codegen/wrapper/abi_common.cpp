// The backend-independent parts of a generated library's main source: tensor metadata, symbol
// tables, input checks that bind the size symbols (bind), output shapes, and the C ABI functions
// other than ptc_open/ptc_close (see abi_common.h for what the backend part must define).
#include "abi_common.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "../expr_printer.h"
#include "ptc/codegen.h"
#include "ptc/error.h"

namespace ptc::wrapper {

using loop::Buffer;

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {  // control and non-ASCII bytes as 3-digit octal escapes
      const char oct[] = {'\\', char('0' + (u >> 6)), char('0' + ((u >> 3) & 7)), char('0' + (u & 7)), 0};
      o += oct;
      continue;
    }
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string comment_text(const std::string& s) {
  std::string o = s;
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return o;
}

std::string attention_fields(const loop::Computation& c, const std::string& indent,
                             const std::function<std::string(size_t, const loop::View&)>& base) {
  const size_t r = c.domain.size(), lead = r - 2;
  const loop::AttentionAttrs& at = c.as<loop::AttentionAttrs>();
  PTC_CHECK(r >= 2 && lead <= 2 && (!(at.heads_inner || at.time_outer) || r == 4) && !(at.heads_inner && at.time_outer),
            "malformed attention extern (", c.origin, ")");
  // heads_inner / time_outer: the output is stored [B, T, H, Dv] / [T, B, H, Dv] (the domain),
  // the operands are [B, H, T, .].
  const bool heads_inner = at.heads_inner;
  const std::vector<sym::Expr> dom = heads_inner     ? std::vector<sym::Expr>{c.domain[0], c.domain[2], c.domain[1], c.domain[3]}
                                     : at.time_outer ? std::vector<sym::Expr>{c.domain[1], c.domain[2], c.domain[0], c.domain[3]}
                                                     : c.domain;
  std::ostringstream os;
  const char* names[] = {"q", "k", "v", "mask"};
  const char* fields[] = {"qs", "ks", "vs", "ms"};
  for (size_t i = 0; i < c.operands.size(); ++i) {  // up to two leading dims: batch and heads
    const loop::View& v = c.operands[i];
    std::string s[4] = {"0", "0", cpp_index(v.strides[r - 2]), cpp_index(v.strides[r - 1])};
    for (size_t d = 0; d < lead; ++d) s[2 - lead + d] = cpp_index(v.strides[d]);
    os << indent << "a." << names[i] << " = " << base(i, v) << " + " << cpp_index(v.offset) << ";";
    for (int d = 0; d < 4; ++d) os << " a." << fields[i] << "[" << d << "] = " << s[d] << ";";
    os << "\n";
  }
  std::string dims[2] = {"1", "1"};
  for (size_t d = 0; d < lead; ++d) dims[2 - lead + d] = cpp_index(dom[d]);
  os << indent << "a.mask_kind = " << at.mask_kind << "; a.causal = " << (at.causal ? "true" : "false")
     << "; a.scale = " << codegen::literal(at.scale, DType::Float32) << "; a.masked_rows_zero = " << (at.masked_rows_zero ? "true" : "false")
     << (heads_inner ? "; a.o_heads_inner = true" : "") << (at.time_outer ? "; a.o_time_outer = true" : "") << (at.kv_group > 1 ? "; a.kv_group = " + std::to_string(at.kv_group) : "") << ";\n";
  os << indent << "a.B = " << dims[0] << "; a.H = " << dims[1] << "; a.Tq = " << cpp_index(dom[r - 2])
     << "; a.Tk = " << cpp_index(c.operands[1].sizes[r - 2]) << "; a.D = " << cpp_index(c.operands[0].sizes[r - 1])
     << "; a.Dv = " << cpp_index(dom[r - 1]) << ";\n";
  return os.str();
}

std::string kernel_summary(const loop::Program& p, const sched::Kernel& k) {
  std::string s = k.name + ":";
  for (int ci : k.comps) s += " " + p.buffers[p.comps[ci].out].name;
  if (!k.origins.empty()) {
    s += " <-";
    for (const auto& o : k.origins) s += " " + o;
  }
  return comment_text(s);
}

std::string window_fields(const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                          const std::array<int64_t, 2>& dilation, int64_t groups) {
  return " a.sh = " + std::to_string(stride[0]) + "; a.sw = " + std::to_string(stride[1]) + "; a.ph = " + std::to_string(padding[0]) +
         "; a.pw = " + std::to_string(padding[1]) + "; a.dh = " + std::to_string(dilation[0]) + "; a.dw = " + std::to_string(dilation[1]) +
         "; a.groups = " + std::to_string(groups) + ";";
}

std::string conv_fields(const loop::Computation& c) {
  if (c.extern_kind == loop::ExternKind::MaxPoolGrad) {
    const loop::MaxPoolGradAttrs& m = c.as<loop::MaxPoolGradAttrs>();
    return window_fields(m.stride, m.padding, m.dilation, 1);
  }
  const loop::ConvAttrs& a = c.as<loop::ConvAttrs>();
  return window_fields(a.stride, a.padding, a.dilation, a.groups);
}

std::string math_modes_literal(const MathModes& m) {
  auto mode = [](MathMode x) -> std::string {
    switch (x) {
      case MathMode::FP32: return "ptc_rt::MathMode::FP32";
      case MathMode::TF32: return "ptc_rt::MathMode::TF32";
      case MathMode::BF16: return "ptc_rt::MathMode::BF16";
      case MathMode::FP16: return "ptc_rt::MathMode::FP16";
    }
    return "ptc_rt::MathMode::FP32";
  };
  return "ptc_rt::MathModes{" + mode(m.gemm) + ", " + mode(m.conv) + ", " + mode(m.attention) + "}";
}

int dtype_code(DType t) {
  switch (t) {
    case DType::UInt8: return 1;
    case DType::Int8: return 2;
    case DType::Int16: return 3;
    case DType::Int32: return 4;
    case DType::Int64: return 5;
    case DType::Float16: return 6;
    case DType::Float32: return 7;
    case DType::Float64: return 8;
    case DType::Bool: return 12;
    case DType::BFloat16: return 13;
    default: user_error("ptc libraries do not support dtype ", dtype_name(t), " at the library boundary");
  }
}

namespace {

void emit_tensor_infos(std::ostream& os, const loop::Program& p, const std::vector<int>& ids, const char* prefix,
                       const std::vector<std::string>& names) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const Buffer& b = p.buffers[ids[i]];
    os << "const int64_t k" << prefix << "Sizes" << i << "[] = {";
    for (size_t d = 0; d < b.sizes.size(); ++d) os << (d ? ", " : "") << b.sizes[d].as_const().value_or(-1);
    os << (b.sizes.empty() ? "0" : "") << "};\n";
    os << "const char* const k" << prefix << "Dims" << i << "[] = {";
    for (size_t d = 0; d < b.sizes.size(); ++d) os << (d ? ", " : "") << quote(b.sizes[d].str());
    os << (b.sizes.empty() ? "nullptr" : "") << "};\n";
  }
  os << "const ptc_tensor_info k" << prefix << "[] = {";
  for (size_t i = 0; i < ids.size(); ++i) {
    const Buffer& b = p.buffers[ids[i]];
    os << (i ? ", " : "") << "{" << quote(names[i]) << ", " << dtype_code(b.dtype) << ", " << b.sizes.size() << ", k"
       << prefix << "Sizes" << i << ", k" << prefix << "Dims" << i << "}";
  }
  os << (ids.empty() ? "{}" : "") << "};\n";
}

}  // namespace

AbiNames abi_names(const loop::Program& p, const Graph& g) {
  AbiNames names;
  for (const auto& [name, r] : p.symbols) names.syms.push_back(name);
  for (const auto& in : g.inputs)
    if (in.role == GraphInput::Role::User) names.in.push_back(in.value->name);
  for (size_t i = 0; i + g.updated_buffers.size() < g.outputs.size(); ++i) names.out.push_back(g.outputs[i]->name);

  // Every symbol must be bound by some input dimension that is exactly that symbol.
  std::set<std::string> bindable;
  for (int id : p.inputs)
    for (const auto& s : p.buffers[id].sizes)
      if (s.kind() == sym::Kind::Symbol) bindable.insert(s.name());
  for (const auto& n : names.syms)
    if (!bindable.count(n)) user_error("symbol ", n, " is not the size of any input dimension, so the library could not infer it at run time");

  return names;
}

void emit_metadata(std::ostream& os, const loop::Program& p, const sched::Schedule& s, const AbiNames& names) {
  const std::vector<std::string>& sym_names = names.syms;
  const std::vector<std::string>& in_names = names.in;
  const std::vector<std::string>& out_names = names.out;
  auto sym_index = [&](const std::string& n) {
    for (size_t i = 0; i < sym_names.size(); ++i)
      if (sym_names[i] == n) return static_cast<int>(i);
    return -1;
  };
  emit_tensor_infos(os, p, p.inputs, "Inputs", in_names);
  emit_tensor_infos(os, p, p.outputs, "Outputs", out_names);
  os << "constexpr int kNumInputs = " << p.inputs.size() << ", kNumOutputs = " << p.outputs.size()
     << ", kNumSyms = " << sym_names.size() << ";\n";
  os << "const char* const kSymNames[] = {";
  for (size_t i = 0; i < sym_names.size(); ++i) os << (i ? ", " : "") << quote(sym_names[i]);
  os << (sym_names.empty() ? "nullptr" : "") << "};\n";
  os << "const int64_t kSymMin[] = {";
  for (size_t i = 0; i < sym_names.size(); ++i) {
    const auto& r = p.symbols.at(sym_names[i]);
    os << (i ? ", " : "") << (r.bounded_below() ? r.lo : 0);
  }
  os << (sym_names.empty() ? "0" : "") << "};\nconst int64_t kSymMax[] = {";
  for (size_t i = 0; i < sym_names.size(); ++i) {
    const auto& r = p.symbols.at(sym_names[i]);
    os << (i ? ", " : "") << (r.bounded_above() ? r.hi : -1);
  }
  os << (sym_names.empty() ? "0" : "") << "};\n\n";
  // Per-kernel timing when built with -DPTC_PROFILE (ptc compile --profile): printed at ptc_close.
  os << "constexpr int kNumKernels = " << s.kernels.size() << ";\n";
  os << "#ifdef PTC_PROFILE\nconst char* const kKernelNames[] = {";
  for (size_t ki = 0; ki < s.kernels.size(); ++ki) {
    std::string label = s.kernels[ki].name + " " + (s.kernels[ki].origins.empty() ? "" : s.kernels[ki].origins.front());
    os << (ki ? ", " : "") << quote(label);
  }
  os << (s.kernels.empty() ? "nullptr" : "") << "};\nptc_rt::KernelProfile g_profile[kNumKernels + 1];\n"
     << "#define PTC_PROFILE_BEGIN(i) const auto ptc_t##i = ptc_rt::now_ns()\n"
     << "#define PTC_PROFILE_END(i) g_profile[i].add(ptc_rt::now_ns() - ptc_t##i)\n"
     << "#else\n#define PTC_PROFILE_BEGIN(i)\n#define PTC_PROFILE_END(i)\n#endif\n\n";
  os << "int fail(const std::string& m) {\n  ptc_rt::last_error() = m;\n  return PTC_ERROR;\n}\n\n";
  os << "std::string shape_str(const ptc_tensor& t) {\n  std::string s = \"[\";\n"
     << "  for (int d = 0; d < t.rank; ++d) s += (d ? \", \" : \"\") + std::to_string(t.sizes[d]);\n  return s + \"]\";\n}\n\n";

  // bind(): checks the inputs and fills the symbols.
  os << "int bind(int n, const ptc_tensor* in, int64_t* sym) {\n"
     << "  if (n != kNumInputs) return fail(\"expected \" + std::to_string(kNumInputs) + \" inputs, got \" + std::to_string(n));\n"
     << "  if (n > 0 && !in) return fail(\"the inputs array is null\");\n"
     << "  for (int k = 0; k < kNumSyms; ++k) sym[k] = -1;\n"
     << "  for (int i = 0; i < n; ++i) {\n"
     << "    const ptc_tensor& t = in[i];\n    const ptc_tensor_info& want = kInputs[i];\n"
     << "    if (t.dtype != want.dtype) return fail(std::string(\"input \") + want.name + \": dtype code \" + std::to_string(t.dtype) + \", expected \" + std::to_string(want.dtype));\n"
     << "    if (t.rank != want.rank) return fail(std::string(\"input \") + want.name + \": rank \" + std::to_string(t.rank) + \", expected \" + std::to_string(want.rank));\n"
     << "    if (t.rank > 0 && !t.sizes) return fail(std::string(\"input \") + want.name + \": sizes pointer is null\");\n"
     << "    for (int d = 0; d < t.rank; ++d)\n"
     << "      if (t.sizes[d] < 0) return fail(std::string(\"input \") + want.name + \": negative size \" + std::to_string(t.sizes[d]));\n"
     << "  }\n";
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Buffer& b = p.buffers[p.inputs[i]];
    for (size_t d = 0; d < b.sizes.size(); ++d) {
      const sym::Expr& s = b.sizes[d];
      std::string v = "in[" + std::to_string(i) + "].sizes[" + std::to_string(d) + "]";
      if (auto c = s.as_const()) {
        os << "  if (" << v << " != " << *c << ") return fail(std::string(\"input " << in_names[i] << ": size \") + shape_str(in["
           << i << "]) + \" does not match: dim " << d << " must be " << *c << "\");\n";
      } else if (s.kind() == sym::Kind::Symbol) {
        int k = sym_index(s.name());
        os << "  if (sym[" << k << "] < 0) sym[" << k << "] = " << v << ";\n"
           << "  else if (sym[" << k << "] != " << v << ") return fail(std::string(\"input " << in_names[i] << ": dim " << d
           << " is \") + std::to_string(" << v << ") + \" but " << s.name() << " is already \" + std::to_string(sym[" << k << "]));\n";
      }
    }
  }
  os << "  for (int k = 0; k < kNumSyms; ++k)\n"
     << "    if (sym[k] < kSymMin[k] || (kSymMax[k] >= 0 && sym[k] > kSymMax[k]))\n"
     << "      return fail(std::string(\"size \") + kSymNames[k] + \" = \" + std::to_string(sym[k]) + \" is outside its range [\" + std::to_string(kSymMin[k]) + \", \" + (kSymMax[k] >= 0 ? std::to_string(kSymMax[k]) : std::string(\"inf\")) + \"]\");\n";
  // Input dims that are expressions of symbols are checked once all are bound.
  os << "  {\n";
  for (size_t k = 0; k < sym_names.size(); ++k) os << "    const int64_t " << sym_names[k] << " = sym[" << k << "];\n";
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Buffer& b = p.buffers[p.inputs[i]];
    for (size_t d = 0; d < b.sizes.size(); ++d)
      if (!b.sizes[d].as_const() && b.sizes[d].kind() != sym::Kind::Symbol)
        os << "    if (in[" << i << "].sizes[" << d << "] != " << cpp_index(b.sizes[d]) << ") return fail(\"input " << in_names[i]
           << ": dim " << d << " must equal " << b.sizes[d].str() << "\");\n";
  }
  for (size_t k = 0; k < sym_names.size(); ++k) os << "    (void)" << sym_names[k] << ";\n";
  os << "  }\n";
  // Every tensor the sizes make (inputs, outputs, temporaries), counted in saturating integers
  // (ptc_rt::SatInt) so that no product overflows: more than 2^47 bytes (128 TiB) is refused
  // before anything is sized in 64-bit integers (unbounded symbols are the caller's to choose).
  if (!sym_names.empty()) {
    os << "  for (int k = 0; k < kNumSyms; ++k)\n"
       << "    if (sym[k] > (int64_t(1) << 62)) return fail(std::string(\"size \") + kSymNames[k] + \" = \" + std::to_string(sym[k]) + \" is too large\");\n";
    os << "  {\n";
    for (size_t k = 0; k < sym_names.size(); ++k)
      os << "    const ptc_rt::SatInt " << sym_names[k] << "(sym[" << k << "]); (void)" << sym_names[k] << ";\n";
    std::set<std::string> seen;
    for (size_t id = 0; id < p.buffers.size(); ++id) {
      const Buffer& b = p.buffers[id];
      sym::Expr numel = b.numel();
      if (numel.as_const()) continue;
      std::string bytes = "(" + cpp_index(numel) + ") * " + std::to_string(dtype_size(b.dtype));
      if (!seen.insert(bytes).second) continue;
      os << "    if (" << bytes << " > 140737488355328LL) return fail(" << quote("the input sizes make tensor '" + b.name + "' ")
         << " + std::to_string((" << bytes << ").v) + \" bytes, more than 2^47\");\n";
    }
    os << "  }\n";
  }
  os << "  for (int i = 0; i < n; ++i) {  // a non-empty input needs its data\n    bool empty = false;\n"
     << "    for (int d = 0; d < in[i].rank; ++d) empty = empty || in[i].sizes[d] == 0;\n"
     << "    if (!empty && !in[i].data) return fail(std::string(\"input \") + kInputs[i].name + \": data pointer is null\");\n  }\n"
     << "  return PTC_OK;\n}\n\n";

  // Output sizes.
  os << "void output_sizes(int index, const int64_t* sym, int64_t* sizes) {\n";
  for (size_t k = 0; k < sym_names.size(); ++k) os << "  const int64_t " << sym_names[k] << " = sym[" << k << "]; (void)" << sym_names[k] << ";\n";
  os << "  switch (index) {\n";
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    os << "    case " << i << ":";
    const Buffer& b = p.buffers[p.outputs[i]];
    for (size_t d = 0; d < b.sizes.size(); ++d) os << " sizes[" << d << "] = " << cpp_index(b.sizes[d]) << ";";
    os << " break;\n";
  }
  os << "    default: break;\n  }\n  (void)sizes;\n}\n\n";

}

void emit_state_tables(std::ostream& os, const loop::Program& p, const WeightLayout& weights) {
  std::vector<std::string> names;
  for (int id : p.states) names.push_back(p.buffers[id].weight);
  emit_tensor_infos(os, p, p.states, "States", names);
  os << "constexpr int kNumStates = " << p.states.size() << ";\n";
  os << "const size_t kStateBytes[] = {";
  for (size_t k = 0; k < p.states.size(); ++k) {
    const Buffer& b = p.buffers[p.states[k]];
    PTC_CHECK(b.numel().as_const(), "state ", b.weight, " has a symbolic size");
    os << (k ? ", " : "") << *b.numel().as_const() * static_cast<int64_t>(dtype_size(b.dtype));
  }
  os << (p.states.empty() ? "0" : "") << "};\nconst size_t kStateInit[] = {";  // byte offsets of the initial contents in the weights
  for (size_t k = 0; k < p.states.size(); ++k) {
    const WeightLayout::Entry* e = weights.find(p.buffers[p.states[k]].weight);
    PTC_CHECK(e, "state ", p.buffers[p.states[k]].weight, " has no place in the blob");
    os << (k ? ", " : "") << e->offset;
  }
  os << (p.states.empty() ? "0" : "") << "};\nconst bool kStateStaged[] = {";  // a run writes new contents to state_next first
  for (size_t k = 0; k < p.states.size(); ++k) os << (k ? ", " : "") << (p.state_next[k] >= 0 ? "true" : "false");
  os << (p.states.empty() ? "false" : "") << "};\n\n";
}

void emit_workspace_plan(std::ostream& os, const loop::Program& p, const sched::Schedule& s) {
  // The workspace: temporaries placed by lifetime (ptc_arena.h), sized now that symbols are known.
  std::vector<sched::Lifetime> lives = sched::temp_lifetimes(p, s);
  if (!lives.empty()) {
    os << "  size_t bytes[" << lives.size() << "], offs[" << lives.size() << "];\n";
    os << "  static const int first[] = {";
    for (size_t i = 0; i < lives.size(); ++i) os << (i ? ", " : "") << lives[i].first;
    os << "}, last[] = {";
    for (size_t i = 0; i < lives.size(); ++i) os << (i ? ", " : "") << lives[i].last;
    os << "};\n";
    for (size_t i = 0; i < lives.size(); ++i) {
      const Buffer& b = p.buffers[lives[i].buffer];
      os << "  bytes[" << i << "] = static_cast<size_t>(" << cpp_index(b.numel()) << ") * " << dtype_size(b.dtype) << ";\n";
    }
    os << "  const size_t ws_bytes = ptc_rt::plan_arena(" << lives.size() << ", bytes, first, last, offs);\n";
  } else {
    os << "  const size_t ws_bytes = 0;\n";
  }
}

void emit_weight_table(std::ostream& os, const loop::Program& p, const WeightLayout& weights, const std::string& weights_var) {
  os << "  void* const bufs[] = {";
  for (size_t id = 0; id < p.buffers.size(); ++id) {
    const Buffer& b = p.buffers[id];
    os << (id ? ", " : "");
    if (b.kind != Buffer::Kind::Weight) {
      os << "nullptr";
      continue;
    }
    const WeightLayout::Entry* e = weights.find(b.weight);
    PTC_CHECK(e, "weight ", b.weight, " has no place in the blob");
    os << "const_cast<unsigned char*>(" << weights_var << " + " << e->offset << ")";
  }
  os << (p.buffers.empty() ? "nullptr" : "") << "};\n  (void)bufs;\n";
}

void emit_buffer_table(std::ostream& os, const loop::Program& p, const sched::Schedule& s, const WeightLayout& weights,
                       const std::string& weights_var, const std::string& ws_var, const std::string& prepared_var) {
  std::vector<sched::Lifetime> lives = sched::temp_lifetimes(p, s);
  std::set<int> planned;
  for (const auto& l : lives) {  // a temporary has storage when it owns a slot or shares one (in place)
    planned.insert(l.buffer);
    planned.insert(l.aliases.begin(), l.aliases.end());
  }
  for (size_t i = 0; i < lives.size(); ++i) {
    std::vector<int> ids{lives[i].buffer};
    ids.insert(ids.end(), lives[i].aliases.begin(), lives[i].aliases.end());  // in place: the same storage
    for (int id : ids) {
      std::string T = codegen::ctype(p.buffers[id].dtype);
      os << "  " << T << "* b" << id << " = reinterpret_cast<" << T << "*>(" << ws_var << " + offs[" << i << "]);\n";
    }
  }
  for (size_t id = 0; id < p.buffers.size(); ++id) {
    const Buffer& b = p.buffers[id];
    std::string T = codegen::ctype(b.dtype);
    switch (b.kind) {
      case Buffer::Kind::Input:
        os << "  const " << T << "* b" << id << " = static_cast<const " << T << "*>(in[" << b.io_index << "].data);\n";
        break;
      case Buffer::Kind::Weight: {
        const WeightLayout::Entry* e = weights.find(b.weight);
        PTC_CHECK(e, "weight ", b.weight, " has no place in the blob");
        os << "  const " << T << "* b" << id << " = reinterpret_cast<const " << T << "*>(" << weights_var << " + " << e->offset << ");\n";
        break;
      }
      case Buffer::Kind::Temp:
        continue;  // placed above (or elided by the schedule)
      case Buffer::Kind::Output:
        os << "  " << T << "* b" << id << " = static_cast<" << T << "*>(out[" << b.io_index << "].data);\n";
        break;
      case Buffer::Kind::State:
        os << "  " << T << "* b" << id << " = static_cast<" << T << "*>(model->state[" << b.io_index << "]);\n";
        break;
      case Buffer::Kind::StateNext:
        os << "  " << T << "* b" << id << " = static_cast<" << T << "*>(model->state_next[" << b.io_index << "]);\n";
        break;
    }
    os << "  (void)b" << id << ";\n";
  }
  // Every buffer's pointer, by buffer id, for the kernel functions.
  os << "  void* const bufs[] = {";
  for (size_t id = 0; id < p.buffers.size(); ++id) {
    bool declared = planned.count(static_cast<int>(id)) || p.buffers[id].kind != Buffer::Kind::Temp;
    os << (id ? ", " : "") << (declared ? "const_cast<void*>(static_cast<const void*>(b" + std::to_string(id) + "))" : std::string("nullptr"));
  }
  if (!prepared_var.empty())
    for (size_t ki = 0; ki < s.kernels.size(); ++ki)
      os << (ki || !p.buffers.empty() ? ", " : "") << prepared_var << "[" << ki << "]";
  os << (p.buffers.empty() && (prepared_var.empty() || s.kernels.empty()) ? "nullptr" : "") << "};\n  (void)bufs;\n";
}

void emit_abi_functions(std::ostream& os, bool c_linkage) {
  if (c_linkage) os << "extern \"C\" {\n";
  os << "#include \"ptc_abi.inc\"\n";
  // A library's state ABI (a training library's part has none: ptc_train_abi.inc is the library's)
  if (c_linkage) os << "#include \"ptc_state_abi.inc\"\n}  // extern \"C\"\n";
}

std::string state_members(const loop::Program& p) {
  const size_t n = std::max<size_t>(p.states.size(), 1);
  return "  void* state[" + std::to_string(n) + "] = {};  // the buffers the program updates (ptc_state.inc)\n" +
         "  void* state_next[" + std::to_string(n) + "] = {};\n";
}

}  // namespace ptc::wrapper
