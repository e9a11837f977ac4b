// Chooses the reader by what the archive holds, not by its file name.
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "zip_archive.h"

namespace ptc {

std::unique_ptr<Graph> load_model(const std::string& path, const LoadOptions& opts) {
  auto file = MappedFile::open(path);
  if (file->size() < 4) user_error(path, ": not a model archive (the file has only ", file->size(), " bytes)");
  const auto* b = reinterpret_cast<const unsigned char*>(file->data());
  if (!(b[0] == 'P' && b[1] == 'K'))
    user_error(path, ": not a model archive (ptc reads zip archives written by torch.export.save or torch.jit.save)");
  ZipArchive zip(file);
  const std::string& root = zip.root();
  bool torchscript = false;
  for (const auto& e : zip.entries())
    if (e.name.compare(0, root.size() + 5, root + "code/") == 0) torchscript = true;
  if (torchscript) return load_torchscript(path, opts);
  if (zip.find(root + "data.pkl") && !zip.find(root + "models/model.json"))
    user_error(path, ": this is a torch.save checkpoint (a pickled object), not a TorchScript or torch.export model; export it with torch.export.save or torch.jit.save");
  if (!opts.input_shapes.empty() || !opts.symbol_ranges.empty())
    user_error(path, ": --input-shape and --symbol are for TorchScript (.pt) models; a torch.export archive carries its "
               "shapes and the ranges of its dynamic dimensions (torch.export.Dim) itself");
  return load_pt2(path);
}

}  // namespace ptc
