// The .pt2 reader: torch.export archives (schema major 8) -> graph IR. Weights stay in the
// memory-mapped archive; see ../shared/PT2_FORMAT.md for the layout.
#include <spdlog/spdlog.h>

#include "pt2_context.h"
#include "ptc/frontend.h"
#include "zip_archive.h"

namespace ptc {
namespace {

using pt2::Context;
using pt2::json;

constexpr int kSchemaMajor = 8;

json parse_json(const Context& ctx, const std::string& text, const std::string& entry) {
  try {
    // Depth-limited by nlohmann's recursive parser only through the stack; guard explicitly.
    int depth = 0, max_depth = 0;
    bool quoted = false, escaped = false;
    for (char c : text) {
      if (quoted) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') quoted = false;
        continue;
      }
      if (c == '"') quoted = true;
      else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
      else if (c == ']' || c == '}') --depth;
    }
    if (max_depth > 256) ctx.fail(entry, " nests ", max_depth, " levels deep; refusing more than 256");
    return json::parse(text);
  } catch (const json::exception& e) {
    ctx.fail(entry, " is not valid JSON (", e.what(), ")");
  }
}

// Reads data/weights or data/constants: name -> bytes in the mapping.
void read_weight_config(Context& ctx, const ZipArchive& zip, const std::string& dir,
                        const std::string& config_name) {
  const ZipEntry* cfg_entry = zip.find(zip.root() + dir + config_name);
  if (!cfg_entry) return;
  json cfg = parse_json(ctx, zip.read(*cfg_entry, 256u << 20), dir + config_name);
  const json& config = ctx.member(cfg, "config", (dir + config_name).c_str());
  if (!config.is_object()) ctx.fail(dir, config_name, ": 'config' must be an object");
  for (const auto& [name, item] : config.items()) {
    std::string what = "weight '" + name + "'";
    if (auto p = ctx.member_opt(item, "use_pickle"); p && p->is_boolean() && p->get<bool>())
      ctx.fail(what, " is a pickled object (a tensor subclass or custom object); ptc reads only plain tensors");
    const std::string& file = ctx.as_string(ctx.member(item, "path_name", what.c_str()), what.c_str());
    if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
      ctx.fail(what, " names file '", file, "' outside ", dir);
    const ZipEntry* e = zip.find(zip.root() + dir + file);
    if (!e) ctx.fail(what, ": the archive has no file ", dir, file);
    TensorData td;
    td.type = ctx.tensor_meta(ctx.member(item, "tensor_meta", what.c_str()), what);
    if (e->stored) {
      ByteSpan span = zip.span(*e);
      td.storage = span.data;
      td.storage_bytes = span.size;
      td.owner = zip.file();
    } else {  // compressed by some other writer: the one case that must copy
      auto bytes = std::make_shared<std::string>(zip.read(*e, size_t(1) << 40));
      td.storage = reinterpret_cast<const std::byte*>(bytes->data());
      td.storage_bytes = bytes->size();
      td.owner = bytes;
    }
    ctx.graph->weights[name] = std::move(td);
  }
}

void read_ranges(Context& ctx, const json& model) {
  const json* rc = ctx.member_opt(model, "range_constraints");
  if (!rc) return;
  if (!rc->is_object()) ctx.fail("range_constraints must be an object");
  for (const auto& item : rc->items()) {
    const std::string& name = item.key();
    const json& r = item.value();
    auto bound = [&](const char* key, int64_t unbounded) {
      const json* b = ctx.member_opt(r, key);
      if (!b || b->is_string()) return unbounded;  // null, "Infinity", "int_oo"
      if (b->is_number_float()) return unbounded;
      if (b->is_number_unsigned() && b->get<uint64_t>() > (uint64_t(1) << 62)) return unbounded;
      int64_t v = ctx.as_int(*b, "a range bound");
      return (v > (int64_t(1) << 62) || v < -(int64_t(1) << 62)) ? unbounded : v;
    };
    sym::Range range{bound("min_val", sym::Range::kNegInf), bound("max_val", sym::Range::kPosInf)};
    if (range.lo > range.hi) ctx.fail("symbol ", name, " has an empty range [", range.lo, ", ", range.hi, "]");
    ctx.graph->symbols[name] = range;
  }
}

Type output_type(Context& ctx, const std::string& name, const char* kind) {
  if (std::string(kind) == "as_tensor") {
    auto it = ctx.tensor_types.find(name);
    if (it == ctx.tensor_types.end()) ctx.fail("value '", name, "' has no entry in tensor_values");
    return it->second;
  }
  auto it = ctx.sym_values.find(name);
  return Type::sym_int(it == ctx.sym_values.end() ? std::nullopt : std::optional<sym::Expr>(it->second));
}

void read_inputs(Context& ctx, const json& graph, const json& signature) {
  const json& inputs = ctx.member(graph, "inputs", "graph");
  const json& specs = ctx.member(signature, "input_specs", "signature");
  if (!inputs.is_array() || !specs.is_array()) ctx.fail("graph inputs and input_specs must be lists");
  if (inputs.size() != specs.size())
    ctx.fail("the graph has ", inputs.size(), " inputs but the signature describes ", specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const json& spec = specs[i];
    if (!spec.is_object() || spec.size() != 1) ctx.fail("input_specs[", i, "] must be a one-key object");
    const std::string& kind = spec.begin().key();
    const json& body = spec.begin().value();
    const json& in = inputs[i];
    if (!in.is_object() || in.size() != 1) ctx.fail("graph input ", i, " must be a one-key object");
    const std::string& arg_kind = in.begin().key();
    const json& arg = in.begin().value();
    if (arg_kind != "as_tensor" && arg_kind != "as_sym_int")
      ctx.fail("graph input ", i, " (", kind, ") is a ", arg_kind, "; ptc supports tensor and SymInt inputs");
    std::string name = arg_kind == "as_tensor" ? ctx.as_string(ctx.member(arg, "name", "input"), "input name")
                                               : ctx.as_string(ctx.member(arg, "as_name", "input"), "input name");
    Type type = output_type(ctx, name, arg_kind.c_str());
    GraphInput::Role role = GraphInput::Role::User;
    std::string target;
    if (kind == "parameter") {
      role = GraphInput::Role::Parameter;
      target = ctx.as_string(ctx.member(body, "parameter_name", "parameter spec"), "parameter_name");
    } else if (kind == "buffer") {
      role = GraphInput::Role::Buffer;
      target = ctx.as_string(ctx.member(body, "buffer_name", "buffer spec"), "buffer_name");
    } else if (kind == "tensor_constant") {
      role = GraphInput::Role::Constant;
      target = ctx.as_string(ctx.member(body, "tensor_constant_name", "constant spec"), "tensor_constant_name");
    } else if (kind != "user_input") {
      ctx.fail("input '", name, "' is a ", kind, " input; ptc supports user inputs, parameters, buffers and tensor constants");
    }
    if (ctx.graph->find_value(name)) ctx.fail("graph input '", name, "' appears twice");
    ctx.graph->add_input(name, type, role, target);
  }
}

void read_node(Context& ctx, const json& jn, size_t index) {
  auto node = std::make_unique<Node>();
  node->target = ctx.as_string(ctx.member(jn, "target", "node"), "node target");
  if (auto n = ctx.member_opt(jn, "name"); n && n->is_string()) node->name = n->get<std::string>();
  if (node->name.empty()) node->name = "node" + std::to_string(index);
  if (auto md = ctx.member_opt(jn, "metadata"); md && md->is_object()) {
    if (auto st = ctx.member_opt(*md, "stack_trace"); st && st->is_string()) node->source.stack_trace = st->get<std::string>();
    if (auto ms = ctx.member_opt(*md, "nn_module_stack"); ms && ms->is_string()) node->source.module_stack = ms->get<std::string>();
  }
  std::string qualified = qualified_from_target(node->target);
  if (auto kind = find_op(qualified)) node->kind = *kind;
  ctx.node_where = "node '" + node->name + "' (" + qualified + ")";
  std::string frame = node->source.user_frame();
  if (!frame.empty()) ctx.node_where += " at " + frame;

  const json& inputs = ctx.member(jn, "inputs", "node");
  if (!inputs.is_array()) ctx.fail("'inputs' must be a list");
  if (const OpInfo* info = node->op()) {
    const auto& sa = info->schema.args;
    std::vector<bool> given(sa.size(), false);
    node->args.resize(sa.size());
    size_t positional = 0;
    for (const auto& in : inputs) {
      std::string name;
      if (auto n = ctx.member_opt(in, "name"); n && n->is_string()) name = n->get<std::string>();
      size_t slot = sa.size();
      for (size_t i = 0; i < sa.size(); ++i)
        if (sa[i].name == name) slot = i;
      if (slot == sa.size()) {  // unnamed positional argument (python operators)
        while (positional < sa.size() && (given[positional] || sa[positional].kwarg_only)) ++positional;
        if (name.empty() && positional < sa.size()) slot = positional;
        else ctx.fail("argument '", name, "' is not in the schema ", info->schema.text);
      }
      if (given[slot]) ctx.fail("argument '", sa[slot].name, "' is given twice");
      node->args[slot] = pt2::convert_argument(ctx, ctx.member(in, "arg", "node input"), &sa[slot]);
      given[slot] = true;
    }
    for (size_t i = 0; i < sa.size(); ++i) {
      if (given[i]) continue;
      if (!sa[i].has_default) ctx.fail("required argument '", sa[i].name, "' is missing");
      node->args[i] = pt2::default_argument(sa[i]);
    }
  } else {
    for (const auto& in : inputs) {
      std::string name;
      if (auto n = ctx.member_opt(in, "name"); n && n->is_string()) name = n->get<std::string>();
      const json& arg = ctx.member(in, "arg", "node input");
      Arg a;
      try {
        a = pt2::convert_argument(ctx, arg, nullptr);
      } catch (const UserError&) {
        a = std::string("<" + (arg.is_object() && !arg.empty() ? arg.begin().key() : "?") + ">");
      }
      node->arg_names.push_back(name);
      node->args.push_back(std::move(a));
    }
  }

  const json& outputs = ctx.member(jn, "outputs", "node");
  if (!outputs.is_array()) ctx.fail("'outputs' must be a list");
  auto define = [&](const std::string& name, const char* kind) {
    if (ctx.graph->find_value(name)) ctx.fail("defines value '", name, "' a second time");
    node->outputs.push_back(ctx.graph->add_value(name, output_type(ctx, name, kind)));
  };
  for (const auto& out : outputs) {
    if (!out.is_object() || out.size() != 1) ctx.fail("an output must be a one-key object");
    const std::string& key = out.begin().key();
    const json& v = out.begin().value();
    if (key == "as_tensor") {
      define(ctx.as_string(ctx.member(v, "name", "output"), "output name"), "as_tensor");
    } else if (key == "as_tensors") {
      if (!v.is_array()) ctx.fail("as_tensors must be a list");
      node->list_output = true;
      for (const auto& t : v) define(ctx.as_string(ctx.member(t, "name", "output"), "output name"), "as_tensor");
    } else if (key == "as_sym_int" || key == "as_sym_float" || key == "as_sym_bool") {
      define(ctx.as_string(ctx.member(v, "as_name", "output"), "output name"), key.c_str());
      if (key != "as_sym_int") node->outputs.back()->type.kind = key == "as_sym_float" ? Type::Kind::SymFloat : Type::Kind::SymBool;
    } else if (key != "as_none") {
      ctx.fail("has an output of kind '", key, "' that ptc does not read");
    }
  }
  ctx.graph->add_node(std::move(node));
  ctx.node_where.clear();
}

void read_outputs(Context& ctx, const json& signature) {
  const json& specs = ctx.member(signature, "output_specs", "signature");
  if (!specs.is_array()) ctx.fail("output_specs must be a list");
  std::vector<std::pair<std::string, Value*>> mutations;  // buffer -> its new value (after the user outputs)
  for (const auto& spec : specs) {
    if (!spec.is_object() || spec.size() != 1) ctx.fail("an output spec must be a one-key object");
    const std::string& kind = spec.begin().key();
    const json& arg = ctx.member(spec.begin().value(), "arg", "output spec");
    if (kind == "buffer_mutation") {
      std::string buffer = ctx.as_string(ctx.member(spec.begin().value(), "buffer_name", "buffer mutation"), "buffer name");
      std::string name = ctx.as_string(ctx.member(arg, "name", "buffer mutation"), "buffer mutation value");
      mutations.emplace_back(buffer, ctx.value(name));
      continue;
    }
    if (kind != "user_output") {
      spdlog::warn("{}: output spec '{}' ignored (only user outputs and buffer mutations are kept)", ctx.file, kind);
      continue;
    }
    if (!arg.is_object() || arg.size() != 1) ctx.fail("an output argument must be a one-key object");
    const std::string& key = arg.begin().key();
    const json& v = arg.begin().value();
    std::string name;
    if (key == "as_tensor") name = ctx.as_string(ctx.member(v, "name", "output"), "output name");
    else if (key == "as_sym_int") name = ctx.as_string(ctx.member(v, "as_name", "output"), "output name");
    else ctx.fail("user output of kind '", key, "' is not supported (ptc returns tensors and SymInts)");
    ctx.graph->outputs.push_back(ctx.value(name));
  }
  for (auto& [buffer, v] : mutations) {
    bool found = false;
    for (const GraphInput& in : ctx.graph->inputs) found = found || (in.role == GraphInput::Role::Buffer && in.target == buffer);
    if (!found) ctx.fail("a buffer mutation names '", buffer, "', which is no buffer input");
    ctx.graph->outputs.push_back(v);
    ctx.graph->updated_buffers.push_back(buffer);
  }
}

std::unique_ptr<Graph> read_archive(const ZipArchive& zip) {
  Context ctx;
  ctx.file = zip.path();
  const std::string& root = zip.root();
  if (zip.find(root + "serialized_exported_program.json") || zip.find("serialized_exported_program.json"))
    ctx.fail("this archive has the flat layout of torch 2.7 or older (serialized_exported_program.json with a pickled state dict); re-export it with torch 2.9 or newer");
  const ZipEntry* model_entry = zip.find(root + "models/model.json");
  if (!model_entry) {
    if (zip.find(root + "data.pkl") || zip.find(root + "constants.pkl"))
      ctx.fail("this is a TorchScript or torch.save archive, not a torch.export archive");
    ctx.fail("not a torch.export archive: it has no ", root, "models/model.json");
  }
  if (zip.find(root + "data/weights/model.pt"))
    ctx.fail("this archive keeps its weights as one pickle (data/weights/model.pt, the layout of torch 2.8); ptc reads the per-tensor layout of torch 2.9 and newer — re-export with a newer torch");

  json model = parse_json(ctx, zip.read(*model_entry, 1u << 30), "models/model.json");
  if (!model.is_object()) ctx.fail("models/model.json must hold a JSON object");
  const json& version = ctx.member(model, "schema_version", "models/model.json");
  int64_t major = ctx.as_int(ctx.member(version, "major", "schema_version"), "schema_version.major");
  if (major != kSchemaMajor) {
    std::string tv;
    if (auto t = ctx.member_opt(model, "torch_version"); t && t->is_string()) tv = " (written by torch " + t->get<std::string>() + ")";
    ctx.fail("model.json has schema version ", major, tv, "; ptc reads schema major version ", kSchemaMajor);
  }

  auto graph = std::make_unique<Graph>();
  ctx.graph = graph.get();
  std::string base = root.empty() ? zip.path() : root.substr(0, root.size() - 1);
  size_t slash = base.find_last_of('/');
  graph->name = slash == std::string::npos ? base : base.substr(slash + 1);
  graph->source_format = cat("torch.export (schema ", major, ".", version.value("minor", 0), ")");
  if (auto t = ctx.member_opt(model, "torch_version"); t && t->is_string())
    graph->source_format += ", torch " + t->get<std::string>();
  read_ranges(ctx, model);

  const json& gm = ctx.member(model, "graph_module", "models/model.json");
  const json& g = ctx.member(gm, "graph", "graph_module");
  if (auto tv = ctx.member_opt(g, "tensor_values")) {
    if (!tv->is_object()) ctx.fail("tensor_values must be an object");
    for (const auto& [name, meta] : tv->items()) ctx.tensor_types[name] = ctx.tensor_meta(meta, "tensor '" + name + "'");
  }
  if (auto sv = ctx.member_opt(g, "sym_int_values")) {
    if (!sv->is_object()) ctx.fail("sym_int_values must be an object");
    for (const auto& [name, v] : sv->items()) ctx.sym_values[name] = ctx.sym_int(v, "sym_int_values entry");
  }
  read_weight_config(ctx, zip, "data/weights/", "model_weights_config.json");
  read_weight_config(ctx, zip, "data/constants/", "model_constants_config.json");

  const json& signature = ctx.member(gm, "signature", "graph_module");
  read_inputs(ctx, g, signature);
  for (const auto& in : graph->inputs)
    if (in.role != GraphInput::Role::User && !graph->weights.count(in.target))
      ctx.fail(role_name(in.role), " '", in.target, "' has no data in the archive");
  const json& graph_nodes = ctx.member(g, "nodes", "graph");
  if (!graph_nodes.is_array()) ctx.fail("graph nodes must be a list");
  const json nodes = pt2::inline_wrappers(ctx, graph_nodes);
  for (size_t i = 0; i < nodes.size(); ++i) read_node(ctx, nodes[i], i);
  read_outputs(ctx, signature);

  std::vector<std::string> problems = verify_graph(*graph);
  if (!problems.empty()) ctx.fail("the graph is malformed: ", problems.front());
  return graph;
}

}  // namespace

namespace {

std::unique_ptr<Graph> read_checked(const ZipArchive& zip) {
  try {
    return read_archive(zip);
  } catch (const nlohmann::json::exception& e) {
    user_error(zip.path(), ": malformed model.json (", e.what(), ")");
  }
}

}  // namespace

std::unique_ptr<Graph> load_pt2(const std::string& path) {
  return read_checked(ZipArchive(MappedFile::open(path)));
}

std::unique_ptr<Graph> load_pt2_bytes(std::string bytes, const std::string& name) {
  return read_checked(ZipArchive(MappedFile::from_bytes(std::move(bytes), name)));
}

}  // namespace ptc
