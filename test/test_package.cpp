// Fitting into builds and deployments: the manifest linked into every library (`ptc inspect
// LIB.so`, ptc_manifest()), `--package` (folder and .tar.gz), the compile cache, the HTML report.
#include <dlfcn.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "ptc/hash.h"
#include "ptc/manifest.h"
#include "test_util.h"

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;
using namespace ptc;

namespace {

// A cache folder of its own for each test case (ptc reads PTC_CACHE_DIR).
std::string fresh_cache(const std::string& name) {
  std::string dir = test::temp_dir() + "/cache-" + name;
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("SHA-256 matches the FIPS 180-4 examples (SHA-NI and portable)", "[package]") {
  for (bool portable : {false, true}) {
    INFO("portable " << portable);
    if (portable) setenv("PTC_SHA256_PORTABLE", "1", 1);
    else unsetenv("PTC_SHA256_PORTABLE");
    CHECK(Sha256().hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(Sha256().update("abc").hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(Sha256().update("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").hex() ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // Split updates give the same digest as one (the buffer across block boundaries).
    std::string million(1000000, 'a');
    Sha256 split;
    for (size_t i = 0; i < million.size(); i += 999) split.update(million.data() + i, std::min<size_t>(999, million.size() - i));
    CHECK(split.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    CHECK(Sha256().update(million).hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // 55, 56, 63, 64 and 65 bytes: the padding's edge cases.
    const std::pair<size_t, const char*> edges[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"}};
    for (const auto& [n, digest] : edges) CHECK(Sha256().update(std::string(n, 'a')).hex() == digest);
  }
  unsetenv("PTC_SHA256_PORTABLE");
}

TEST_CASE("a compiled library carries its manifest: ptc inspect LIB.so and ptc_manifest()", "[package]") {
  std::string so = test::temp_dir() + "/manifest_mlp_dyn.so";
  auto r = test::run_ptc("compile -q " + test::fixture("mlp_dyn.pt2") + " -o " + so);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  json m = read_library_manifest(so);
  CHECK(m["manifest_version"] == kManifestVersion);
  CHECK(m["ptc_version"] == PTC_VERSION);
  CHECK(m["model"]["name"] == "mlp_dyn");
  CHECK(m["model"]["sha256"] == sha256_file(test::fixture("mlp_dyn.pt2")));
  CHECK(m["library"] == "manifest_mlp_dyn.so");
  CHECK(m["device"] == "cpu");
  CHECK(m["arch"] == "native");
  REQUIRE(m["inputs"].size() == 1);
  CHECK(m["inputs"][0]["name"] == "x");
  CHECK(m["inputs"][0]["dtype"] == "float32");
  CHECK(m["inputs"][0]["sizes"] == json::array({"s77", 64}));
  CHECK(m["outputs"][0]["sizes"] == json::array({"s77", 64}));
  CHECK(m["symbols"]["s77"] == json::array({1, 1024}));
  CHECK(m["weights"]["mode"] == "embedded");

  // The same text through the library's C ABI.
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h);
  auto fn = reinterpret_cast<const char* (*)()>(dlsym(h, "ptc_manifest"));
  REQUIRE(fn);
  CHECK(json::parse(fn()) == m);
  dlclose(h);

  auto text = test::run_ptc("inspect " + so);
  INFO(text.output);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("model:   mlp_dyn from mlp_dyn.pt2") != std::string::npos);
  CHECK(text.output.find("x: float32[s77, 64]") != std::string::npos);
  CHECK(text.output.find("s77 in [1, 1024]") != std::string::npos);
  auto as_json = test::run_ptc("inspect --json " + so);
  CHECK(json::parse(as_json.output) == m);
}

TEST_CASE("ptc inspect refuses files that are not ptc libraries with one sentence", "[package][bad_input]") {
  auto r = test::run_ptc("inspect /bin/sh");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("/bin/sh: not a library built by ptc (no .ptc_manifest section") != std::string::npos);
  // A truncated library: the section table lies past the end of the file.
  std::string so = test::temp_dir() + "/truncated_mlp.so";
  auto c = test::run_ptc("compile -q " + test::fixture("mlp.pt2") + " -o " + so);
  REQUIRE(c.exit_code == 0);
  std::string bytes = test::read_file(so);
  test::write_file(so, bytes.substr(0, 4096));
  r = test::run_ptc("inspect " + so);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("not a library built by ptc (malformed section table)") != std::string::npos);
  // Only the ELF header.
  test::write_file(so, bytes.substr(0, 70));
  r = test::run_ptc("inspect " + so);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("not a library built by ptc") != std::string::npos);
  CHECK(r.output.find("internal error") == std::string::npos);
  // Libraries whose .ptc_manifest section is not what ptc writes: fields missing, a symbol range
  // of the wrong length, JSON nested deep enough to exhaust a recursive parser's stack.
  const std::pair<const char*, std::string> forged[] = {
      {"fields", R"({"manifest_version":1})"},
      {"range", R"({"manifest_version":1,"ptc_version":"0","abi_version":1,"device":"cpu","arch":"x","model":{"name":"m","file":"f","sha256":"0","format":"x"},"inputs":[],"outputs":[],"symbols":{"s":[]},"weights":{"mode":"embedded","bytes":0},"flags":{}})"},
      {"deep", std::string(200000, '[') + std::string(200000, ']')}};
  for (const auto& [name, text] : forged) {
    std::string c = test::temp_dir() + "/forged_" + name + ".c", lib = test::temp_dir() + "/forged_" + name + ".so";
    std::string bytes;
    for (char ch : text) bytes += std::to_string(static_cast<int>(static_cast<unsigned char>(ch))) + ",";
    test::write_file(c, "__attribute__((section(\".ptc_manifest\"), used)) static const char m[] = {" + bytes + "0};\n");
    REQUIRE(std::system(("cc -shared -fPIC -o " + lib + " " + c).c_str()) == 0);
    auto f = test::run_ptc("inspect " + lib);
    INFO(name << ": " << f.output);
    CHECK(f.exit_code == 1);
    CHECK(f.output.find(lib + ": not a library built by ptc (the manifest is malformed)") != std::string::npos);
  }
}

TEST_CASE("packages: --package writes a folder or a .tar.gz with the library, header, weights and manifest.json", "[package]") {
  std::string dir = test::temp_dir() + "/pkg_dir";
  fs::remove_all(dir);
  // Only --package: the library is named after the model.
  auto r = test::run_ptc("compile -q " + test::fixture("mlp.pt2") + " --package " + dir + " --weights external");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* f : {"mlp.so", "mlp.h", "mlp.weights", "manifest.json"}) CHECK(fs::exists(dir + "/" + f));
  json m = json::parse(test::read_file(dir + "/manifest.json"));
  CHECK(m == read_library_manifest(dir + "/mlp.so"));
  CHECK(m["weights"]["mode"] == "external");
  // The packaged library opens with its packaged weights (found next to it).
  auto run = test::run_ptc("run " + dir + "/mlp.so --random -q");
  INFO(run.output);
  CHECK(run.exit_code == 0);

  std::string tgz = test::temp_dir() + "/pkg.tar.gz", so = test::temp_dir() + "/pkg_cnn.so";
  r = test::run_ptc("compile -q " + test::fixture("small_cnn.pt2") + " -o " + so + " --package " + tgz);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(so));
  std::string list = test::temp_dir() + "/pkg.txt";
  REQUIRE(std::system(("tar -tzf " + tgz + " > " + list).c_str()) == 0);
  std::string names = test::read_file(list);
  for (const char* f : {"pkg_cnn/pkg_cnn.so", "pkg_cnn/pkg_cnn.h", "pkg_cnn/manifest.json"}) CHECK(names.find(f) != std::string::npos);

  auto none = test::run_ptc("compile " + test::fixture("mlp.pt2"));
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("nothing to write: give -o LIB.so, --package DIR or both") != std::string::npos);
  auto missing = test::run_ptc("compile " + test::fixture("mlp.pt2") + " -o /nonexistent-folder/x.so");
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find("-o /nonexistent-folder/x.so: the folder /nonexistent-folder does not exist") != std::string::npos);
}

TEST_CASE("an embedded-weights compile writes the library and its header, nothing else", "[package]") {
  // (A staged copy of the weights as a side file was once left next to every library.)
  const std::string dir = test::temp_dir() + "/only_outputs";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = test::run_ptc("compile -q --no-cache " + test::fixture("mlp.pt2") + " -o " + dir + "/m.so");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"m.so", "m.h"});
}

TEST_CASE("the compile cache: a second identical compile is a hit with the same bytes; any change is a miss", "[package][cache]") {
  std::string cache = fresh_cache("hits");
  std::string env = "PTC_CACHE_DIR=" + cache + " ";
  std::string a = test::temp_dir() + "/cache_a.so", b = test::temp_dir() + "/cache_b_dir";
  fs::create_directories(b);
  std::string model = test::fixture("tfm_dyn.pt2");
  auto compile = [&](const std::string& args) {
    return test::run_ptc_env(env, "compile " + model + " " + args);
  };
  auto first = compile("-o " + a);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.find("from the compile cache") == std::string::npos);
  std::string lib1 = test::read_file(a), header1 = test::read_file(test::temp_dir() + "/cache_a.h");
  fs::remove(a);
  auto second = compile("-o " + a + " --report " + test::temp_dir() + "/cache_a.json");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.find("from the compile cache") != std::string::npos);
  CHECK(test::read_file(a) == lib1);
  CHECK(test::read_file(test::temp_dir() + "/cache_a.h") == header1);
  json rep = json::parse(test::read_file(test::temp_dir() + "/cache_a.json"));
  CHECK(rep["cache"]["hit"] == true);
  CHECK(rep["kernels"].size() > 0);
  // The cached library runs.
  auto run = test::run_ptc("run " + a + " --random -q --symbol s77=3 --symbol s87=9");
  INFO(run.output);
  CHECK(run.exit_code == 0);

  // A different option, or a different library name (its soname), is a different entry.
  auto profiled = compile("-o " + a + " --profile");
  CHECK(profiled.output.find("from the compile cache") == std::string::npos);
  auto renamed = compile("-o " + b + "/other.so");
  CHECK(renamed.output.find("from the compile cache") == std::string::npos);
  // ... but its translation units come from the object cache: only the manifest differs.
  CHECK(renamed.exit_code == 0);
  // --no-cache neither reads nor writes.
  auto uncached = compile("-o " + a + " --no-cache -v");
  CHECK(uncached.output.find("from the compile cache") == std::string::npos);
  CHECK(uncached.output.find("(0 from the cache") != std::string::npos);
  // Options that print intermediate results run the pipeline.
  auto dumped = compile("-o " + a + " --dump-loops " + test::temp_dir() + "/cache.loops");
  CHECK(dumped.output.find("from the compile cache") == std::string::npos);
  CHECK(fs::file_size(test::temp_dir() + "/cache.loops") > 0);
  // A changed model (other bytes) is a miss.
  auto other = test::run_ptc_env(env, "compile " + test::fixture("tfm_dyn.core.pt2") + " -o " + a);
  CHECK(other.output.find("from the compile cache") == std::string::npos);
}

TEST_CASE("the object cache: an edit that changes one kernel file rebuilds only that translation unit", "[package][cache]") {
  std::string cache = fresh_cache("objects");
  std::string env = "PTC_CACHE_DIR=" + cache + " PTC_PREBUILT_DIR= ";  // the runtime's unit through the cache too
  std::string so = test::temp_dir() + "/objects.so";
  auto first = test::run_ptc_env(env, "compile -v " + test::fixture("small_cnn.pt2") + " -o " + so);
  REQUIRE(first.exit_code == 0);
  // The same graph under another export flavour: different model bytes, so a new whole-compile
  // entry, but the runtime's translation unit (the slowest) is shared.
  auto second = test::run_ptc_env(env, "compile -v " + test::fixture("small_cnn.core.pt2") + " -o " + so);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  std::smatch m;
  std::string out = second.output;
  REQUIRE(std::regex_search(out, m, std::regex(R"(compiled (\d+) translation units \((\d+) from the cache)")));
  CHECK(std::stoi(m[2]) >= 1);
  CHECK(std::stoi(m[2]) < std::stoi(m[1]));
}

TEST_CASE("ptc prebuild: the runtime helpers compiled once are linked instead of built per model", "[package][cache]") {
  std::string dir = fresh_cache("prebuilt");
  auto pre = test::run_ptc("prebuild --dir " + dir);
  INFO(pre.output);
  REQUIRE(pre.exit_code == 0);
  size_t objects = std::distance(fs::directory_iterator(dir), {});
  CHECK(objects >= 3);  // GEMM, convolution, attention
  // Again: every unit is up to date, nothing is rebuilt.
  auto again = test::run_ptc("prebuild --dir " + dir);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("up to date") != std::string::npos);
  CHECK(static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})) == objects);
  // small_cnn needs the GEMM unit and a convolution unit (oneDNN's where ptc has it, else ptc's
  // own): both come prebuilt, and the library runs
  // (the model tests compare every fixture against eager with the build tree's prebuilt objects).
  std::string so = test::temp_dir() + "/prebuilt_cnn.so";
  auto c = test::run_ptc_env("PTC_PREBUILT_DIR=" + dir + " ", "compile -v --no-cache " + test::fixture("small_cnn.pt2") + " -o " + so);
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(c.output.find("2 prebuilt") != std::string::npos);
  CHECK(test::run_ptc("run " + so + " --random").exit_code == 0);
  // Objects built by another compiler command are not taken: with PTC_PREBUILT_DIR empty, none.
  auto none = test::run_ptc_env("PTC_PREBUILT_DIR= ", "compile -v --no-cache " + test::fixture("small_cnn.pt2") + " -o " + so);
  CHECK(none.output.find("0 prebuilt") != std::string::npos);
  auto other = test::run_ptc_env("PTC_PREBUILT_DIR=" + dir + " ", "compile -v --no-cache --profile " + test::fixture("small_cnn.pt2") + " -o " + so);
  CHECK(other.output.find("0 prebuilt") != std::string::npos);
}

TEST_CASE("ptc prebuild: a compiler that fails is one warning per unit and a non-zero exit", "[package][cache]") {
  std::string dir = fresh_cache("prebuilt-bad");
  auto r = test::run_ptc("prebuild --dir " + dir + " --cxx /nonexistent/c++");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("not prebuilt") != std::string::npos);
  CHECK(r.output.find("internal error") == std::string::npos);
}

TEST_CASE("the cache trims itself to PTC_CACHE_MAX_MB, oldest first", "[package][cache]") {
  std::string cache = fresh_cache("trim");
  std::string so = test::temp_dir() + "/trim.so";
  auto r = test::run_ptc_env("PTC_CACHE_DIR=" + cache + " PTC_CACHE_MAX_MB=0 ", "compile -q " + test::fixture("mlp.pt2") + " -o " + so);
  REQUIRE(r.exit_code == 0);
  size_t entries = 0;
  for (const char* kind : {"models", "objects"})
    if (fs::exists(cache + "/" + kind))
      for (const auto& shard : fs::directory_iterator(cache + "/" + kind)) entries += std::distance(fs::directory_iterator(shard), {});
  CHECK(entries == 0);
  auto bad = test::run_ptc_env("PTC_CACHE_DIR=" + cache + " PTC_CACHE_MAX_MB=lots ", "compile " + test::fixture("mlp.pt2") + " -o " + so);
  CHECK(bad.exit_code == 0);
  CHECK(bad.output.find("PTC_CACHE_MAX_MB=lots is not a number of megabytes") != std::string::npos);
}

TEST_CASE("the HTML report: --report FILE.html is one self-contained page with every kernel and its graph nodes", "[package][report]") {
  std::string so = test::temp_dir() + "/report_tfm.so", html = test::temp_dir() + "/report_tfm.html",
              js = test::temp_dir() + "/report_tfm.json";
  auto r = test::run_ptc("compile -q --no-cache " + test::fixture("tiny_tfm.pt2") + " -o " + so + " --report " + html);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  r = test::run_ptc("compile -q " + test::fixture("tiny_tfm.pt2") + " -o " + so + " --report " + js);
  REQUIRE(r.exit_code == 0);
  std::string page = test::read_file(html);
  json rep = json::parse(test::read_file(js));
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("</html>") != std::string::npos);
  // Self-contained: no scripts, stylesheets or images fetched from elsewhere.
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("src=") == std::string::npos);
  CHECK(page.find("<link") == std::string::npos);
  for (const char* section : {"id=\"stages\"", "id=\"kernels\"", "id=\"arena\"", "id=\"graph\"", "<svg class=\"arena\""})
    CHECK(page.find(section) != std::string::npos);
  // Every kernel has its row, and the row names each graph node it fused, with its source line.
  REQUIRE(rep["kernels"].size() > 3);
  for (size_t i = 0; i < rep["kernels"].size(); ++i) {
    size_t row = page.find("<tr id=\"kernel-" + std::to_string(i) + "\"");
    REQUIRE(row != std::string::npos);
    std::string text = page.substr(row, page.find("</tr>", row) - row);
    CHECK(text.find("<code>" + rep["kernels"][i]["name"].get<std::string>() + "</code>") != std::string::npos);
    for (const auto& n : rep["kernels"][i]["nodes"]) {
      CHECK(text.find("href=\"#node-" + n["name"].get<std::string>() + "\"") != std::string::npos);
      if (n.contains("source")) CHECK(text.find("scripts/export_models.py:") != std::string::npos);
    }
  }
  // Every graph node has its row, linking to the kernels that compute it.
  for (const auto& n : rep["graph"]) {
    size_t row = page.find("<tr id=\"node-" + n["name"].get<std::string>() + "\"");
    REQUIRE(row != std::string::npos);
    std::string text = page.substr(row, page.find("</tr>", row) - row);
    for (const auto& k : n["kernels"]) CHECK(text.find("href=\"#kernel-" + std::to_string(k.get<int>()) + "\"") != std::string::npos);
  }
  // One box per arena buffer in the chart.
  size_t boxes = 0;
  for (size_t p = page.find("<rect"); p != std::string::npos; p = page.find("<rect", p + 1)) ++boxes;
  CHECK(boxes == rep["arena"]["buffers"].size());
}

TEST_CASE("deterministic builds: the same model and flags give byte-identical sources and library", "[package]") {
  // Two compiles without the cache (so both really build), each keeping its sources.
  std::string so = test::temp_dir() + "/det.so", e1 = test::temp_dir() + "/det_src1", e2 = test::temp_dir() + "/det_src2";
  std::string first_lib, first_header;
  for (const std::string& emit : {e1, e2}) {
    auto r = test::run_ptc("compile -q --no-cache " + test::fixture("tfm_dyn.pt2") + " -o " + so + " --emit-dir " + emit);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (first_lib.empty()) {
      first_lib = test::read_file(so);
      first_header = test::read_file(test::temp_dir() + "/det.h");
    } else {
      CHECK(test::read_file(so) == first_lib);
      CHECK(test::read_file(test::temp_dir() + "/det.h") == first_header);
    }
  }
  size_t sources = 0;
  for (const auto& f : fs::directory_iterator(e1)) {
    const std::string name = f.path().filename().string();
    if (name.size() < 4 || (name.compare(name.size() - 4, 4, ".cpp") != 0 && name.compare(name.size() - 2, 2, ".h") != 0)) continue;
    INFO(name);
    CHECK(test::read_file(f.path().string()) == test::read_file(e2 + "/" + name));
    ++sources;
  }
  CHECK(sources >= 5);
}
