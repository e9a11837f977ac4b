// The manifest of a compiled library: a JSON document naming the ptc that built it, the model's
// SHA-256, the signature (inputs, outputs, symbols), the device and architecture and the compile
// flags. It is linked into the library (section `.ptc_manifest`, also returned by the
// library's `ptc_manifest()`), written as manifest.json by `ptc compile --package`, and read back
// by `ptc inspect model.so` without loading the library.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ptc/codegen.h"
#include "ptc/graph.h"

namespace ptc {

struct ManifestOptions {
  std::string device;        // cpu | cuda
  std::string arch;          // -march value or sm_XX
  std::string weights;       // embedded | external
  std::string library;       // the library's file name
  std::string model_file;    // the model's file name (no folders)
  std::string model_sha256;
  nlohmann::ordered_json flags = nlohmann::ordered_json::object();  // the other options that change the code
};

constexpr int kManifestVersion = 1;

nlohmann::ordered_json make_manifest(const Graph& g, const WeightLayout& w, const ManifestOptions& o);

// A C++ translation unit that embeds `manifest` (section .ptc_manifest) and defines ptc_manifest().
std::string manifest_source(const nlohmann::ordered_json& manifest);

// The manifest of a library built by ptc, checked to have every field make_manifest writes with
// its type. Throws UserError when the file is unreadable, not a 64-bit ELF shared library,
// malformed, or has no (well-formed) ptc manifest.
nlohmann::ordered_json read_library_manifest(const std::string& path);

// One of a manifest's inputs or outputs as text: "x: float32[s77, 64]".
std::string manifest_tensor_text(const nlohmann::ordered_json& tensor);

// True when the file starts with the ELF magic (a compiled library rather than a model archive).
bool is_elf_file(const std::string& path);

}  // namespace ptc
