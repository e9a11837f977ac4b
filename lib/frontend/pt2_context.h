// Shared state of the .pt2 reader while it turns model.json into a Graph (internal header).
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <string>

#include "ptc/error.h"
#include "ptc/graph.h"

namespace ptc::pt2 {

using json = nlohmann::json;

struct Context {
  std::string file;  // path, for messages
  Graph* graph = nullptr;
  std::map<std::string, Type> tensor_types;     // graph.tensor_values
  std::map<std::string, sym::Expr> sym_values;  // graph.sym_int_values

  // Where an error happened: "in node 'linear' (aten::linear) at models.py:9: ...".
  std::string node_where;

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    user_error(file, ": ", node_where.empty() ? std::string() : node_where + ": ", parts...);
  }

  // Typed access to JSON members with clear errors ("field 'sizes' must be a list").
  const json& member(const json& obj, const char* key, const char* what) const;
  const json* member_opt(const json& obj, const char* key) const;
  int64_t as_int(const json& v, const char* what) const;
  double as_double(const json& v, const char* what) const;
  const std::string& as_string(const json& v, const char* what) const;

  sym::Range range_of(const std::string& symbol);
  sym::Expr parse_sym(const std::string& text);
  sym::Expr sym_int(const json& v, const char* what);  // {as_int} | {as_expr: {expr_str}}
  Type tensor_meta(const json& meta, const std::string& what);
  Value* value(const std::string& name) const;  // must be defined
};

// Converts one serialized Argument to a node argument, guided by the schema type (nullptr for
// unknown ops).
Arg convert_argument(Context& ctx, const json& arg, const SchemaArg* schema);
// The schema default of `sa` as an Arg (list defaults broadcast to the declared length).
Arg default_argument(const SchemaArg& sa);
// The graph's nodes with higher-order wrappers (wrap_with_set_grad_enabled, wrap_with_autocast)
// replaced by their subgraphs' nodes (pt2_inline.cpp).
json inline_wrappers(Context& ctx, const json& nodes);

}  // namespace ptc::pt2
