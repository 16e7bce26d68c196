#include "spec/data_paths.h"

#include <utility>
#include <vector>

namespace stoke::spec {

bool IsDataRootPath(const std::string& path) { return path.rfind(kDataRootPrefix, 0) == 0; }

void ForEachPath(v1::JobSpec& spec,
                 const std::function<void(const std::string& field, std::string* path)>& visit) {
  auto each = [&](const std::vector<std::pair<const char*, std::string*>>& fields) {
    for (const auto& [field, path] : fields) {
      if (!path->empty()) visit(field, path);
    }
  };
  if (spec.has_data()) {  // a script job has none, and gets none
    auto* data = spec.mutable_data();
    if (data->has_mnist()) each({{"data.mnist.path", data->mutable_mnist()->mutable_path()}});
    if (data->has_cifar10()) each({{"data.cifar10.path", data->mutable_cifar10()->mutable_path()}});
    if (data->has_tokens()) {
      auto* t = data->mutable_tokens();
      each({{"data.tokens.train_path", t->mutable_train_path()},
            {"data.tokens.val_path", t->mutable_val_path()}});
    }
    if (data->has_images()) {
      auto* i = data->mutable_images();
      each({{"data.images.path", i->mutable_path()},
            {"data.images.manifest", i->mutable_manifest()},
            {"data.images.val_path", i->mutable_val_path()},
            {"data.images.val_manifest", i->mutable_val_manifest()}});
    }
    if (data->has_shards()) {  // braces are kept: the pattern is expanded where it is read
      auto* s = data->mutable_shards();
      each({{"data.shards.urls", s->mutable_urls()},
            {"data.shards.val_urls", s->mutable_val_urls()}});
    }
    if (data->has_arrays()) {  // "file.safetensors:tensor" keeps its tensor's name
      auto* a = data->mutable_arrays();
      each({{"data.arrays.inputs", a->mutable_inputs()},
            {"data.arrays.targets", a->mutable_targets()},
            {"data.arrays.val_inputs", a->mutable_val_inputs()},
            {"data.arrays.val_targets", a->mutable_val_targets()}});
    }
  }
  if (spec.model().has_torchscript()) {
    each({{"model.torchscript.path", spec.mutable_model()->mutable_torchscript()->mutable_path()}});
  }
  if (spec.model().has_python()) {
    each({{"model.python.file", spec.mutable_model()->mutable_python()->mutable_file()}});
  }
  if (spec.has_command()) {
    each({{"command.workdir", spec.mutable_command()->mutable_workdir()}});
  }
}

}  // namespace stoke::spec
