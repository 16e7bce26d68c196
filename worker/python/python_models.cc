#include "worker/python/python_models.h"

#include <cstdlib>
#include <stdexcept>

#include "worker/models/model_factory.h"

#if STOKE_WITH_PYTHON
#include "worker/python/python_model.h"
#endif

namespace stoke::worker::python {

bool Available() { return STOKE_WITH_PYTHON; }

std::string DefaultExecutable() {
  if (const char* chosen = std::getenv("STOKE_PYTHON"); chosen != nullptr && *chosen != '\0') {
    return chosen;
  }
  return STOKE_PYTHON_EXECUTABLE;
}

#if STOKE_WITH_PYTHON

void Start(const std::string& executable) {
  StartInterpreter(executable);
  Preload();
}

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data,
                                      const data::ReadOptions& files) {
  if (const auto* python = std::get_if<PythonConfig>(&config)) {
    return std::make_shared<PythonModelImpl>(*python, data);
  }
  return worker::BuildNetwork(config, data, files);
}

#else

void Start(const std::string&) {
  throw std::runtime_error(
      "this trainer was built without Python (Python's development files, libtorch_python "
      "or pybind11 were not found)");
}

std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data,
                                      const data::ReadOptions& files) {
  if (std::holds_alternative<PythonConfig>(config)) {
    throw std::invalid_argument(
        "model.python: this worker was built without Python models (Python's development "
        "files, libtorch_python or pybind11 were missing when it was built)");
  }
  return worker::BuildNetwork(config, data, files);
}

#endif

}  // namespace stoke::worker::python
