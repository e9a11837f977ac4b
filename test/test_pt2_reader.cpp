// The .pt2 reader against what scripts/export_models.py recorded for each fixture.
#include <catch2/catch.hpp>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ptc/frontend.h"
#include "test_util.h"

using nlohmann::json;
using namespace ptc;

namespace {

const char* kFixtures[] = {"mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "index_ops", "mha"};

json expect_of(const std::string& name) { return json::parse(test::read_file(test::fixture(name + ".expect.json"))); }

void check_sizes(const Type& t, const json& want) {
  REQUIRE(t.is_tensor());
  REQUIRE(t.sizes.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].is_string()) CHECK(t.sizes[i].str() == want[i].get<std::string>());
    else CHECK(t.sizes[i].as_const() == want[i].get<int64_t>());
  }
}

// Whether [p, p+n) lies inside a memory mapping of `path` (from /proc/self/maps).
bool mapped_from(const void* p, size_t n, const std::string& path) {
  char real[PATH_MAX];
  if (!realpath(path.c_str(), real)) return false;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    if (line.size() < strlen(real) || line.compare(line.size() - strlen(real), std::string::npos, real) != 0) continue;
    uintptr_t lo = 0, hi = 0;
    std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi);
    if (addr >= lo && addr + n <= hi) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("pt2 reader matches the export's record for every fixture and flavour", "[pt2]") {
  for (const char* name : kFixtures) {
    json expect = expect_of(name);
    for (const char* flavour : {"export", "core"}) {
      const json& e = expect["flavours"][flavour];
      std::string file = test::fixture(e["file"].get<std::string>());
      INFO(file);
      auto g = load_pt2(file);
      CHECK(verify_graph(*g).empty());
      CHECK(g->nodes().size() == e["num_serialized_nodes"].get<size_t>());
      std::map<std::string, int> hist;
      for (const auto& n : g->nodes()) {
        hist[n->target]++;
        CHECK(n->kind != OpKind::Unknown);  // every fixture op is in the op table
      }
      CHECK(hist == e["targets"].get<std::map<std::string, int>>());

      std::vector<const Value*> user;
      for (const auto& in : g->inputs)
        if (in.role == GraphInput::Role::User) user.push_back(in.value);
      REQUIRE(user.size() == e["inputs"].size());
      for (size_t i = 0; i < user.size(); ++i) {
        CHECK(user[i]->name == e["inputs"][i]["name"].get<std::string>());
        CHECK(dtype_name(user[i]->type.dtype) == e["inputs"][i]["dtype"].get<std::string>());
        check_sizes(user[i]->type, e["inputs"][i]["sizes"]);
      }
      REQUIRE(g->outputs.size() == e["outputs"].size());
      for (size_t i = 0; i < g->outputs.size(); ++i) {
        CHECK(g->outputs[i]->name == e["outputs"][i]["name"].get<std::string>());
        check_sizes(g->outputs[i]->type, e["outputs"][i]["sizes"]);
      }
      for (const auto& [sym, r] : e["symbols"].items()) {
        REQUIRE(g->symbols.count(sym));
        CHECK(g->symbols[sym].lo == r[0].get<int64_t>());
        CHECK(g->symbols[sym].hi == r[1].get<int64_t>());
      }
      std::map<GraphInput::Role, std::array<int64_t, 3>> totals;
      for (const auto& in : g->inputs) {
        if (in.role == GraphInput::Role::User) continue;
        const TensorData& td = g->weights.at(in.target);
        auto& t = totals[in.role];
        t[0] += 1;
        t[1] += *td.type.static_numel();
        t[2] += static_cast<int64_t>(td.nbytes());
        // No copy: the bytes are a span of the archive's own memory mapping.
        CHECK(mapped_from(td.storage, td.storage_bytes, file));
      }
      auto want = [&](const char* role) {
        const json& w = e["weights"][role];
        return std::array<int64_t, 3>{w["count"].get<int64_t>(), w["numel"].get<int64_t>(), w["bytes"].get<int64_t>()};
      };
      CHECK(totals[GraphInput::Role::Parameter] == want("parameters"));
      CHECK(totals[GraphInput::Role::Buffer] == want("buffers"));
      CHECK(totals[GraphInput::Role::Constant] == want("constants"));
    }
  }
}

TEST_CASE("pt2 reader fills schema defaults and keeps source lines", "[pt2]") {
  auto g = load_pt2(test::fixture("mlp.pt2"));
  const Node* gelu = nullptr;
  for (const auto& n : g->nodes())
    if (n->kind == OpKind::Gelu) gelu = n.get();
  REQUIRE(gelu);
  REQUIRE(gelu->arg("approximate"));
  CHECK(std::get<std::string>(*gelu->arg("approximate")) == "none");
  CHECK(gelu->source.user_frame().find("models") != std::string::npos);
}

TEST_CASE("ptc inspect shows a dynamic batch as a symbol with its range", "[cli]") {
  auto r = test::run_ptc("inspect " + test::fixture("mlp_dyn.pt2"));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("s77 in [1, 1024]") != std::string::npos);
  CHECK(r.output.find("x: f32[s77, 64]") != std::string::npos);
  CHECK(r.output.find("%linear: f32[s77, 256] = aten::linear(%x, %p_l1_weight, %p_l1_bias)") != std::string::npos);
  CHECK(r.output.find("unknown ops: none") != std::string::npos);
}

TEST_CASE("ptc inspect --json is machine-readable", "[cli]") {
  auto r = test::run_ptc("inspect --json " + test::fixture("small_cnn.core.pt2"));
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.output);
  json e = expect_of("small_cnn")["flavours"]["core"];
  CHECK(j["nodes"].size() == e["num_serialized_nodes"].get<size_t>());
  CHECK(j["weights"]["total"]["bytes"] == e["weights"]["total"]["bytes"]);
  CHECK(j["inputs"][0]["sizes"] == e["inputs"][0]["sizes"]);
  CHECK(j["unknown_ops"].empty());
  int sum = 0;
  for (const auto& [op, c] : j["op_histogram"].items()) sum += c.get<int>();
  CHECK(sum == static_cast<int>(j["nodes"].size()));
}

TEST_CASE("ptc --version and --help", "[cli]") {
  auto v = test::run_ptc("--version");
  CHECK(v.exit_code == 0);
  CHECK(v.output.find("ptc " PTC_VERSION) != std::string::npos);
  auto h = test::run_ptc("--help");
  CHECK(h.exit_code == 0);
  CHECK(h.output.find("inspect") != std::string::npos);
  auto bad = test::run_ptc("--no-such-flag");
  CHECK(bad.exit_code == 1);
}
