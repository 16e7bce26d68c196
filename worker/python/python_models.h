// What the trainer process needs of the embedded Python, without Python.h: start the
// interpreter, and build networks with Python models among them.
#pragma once

#include <memory>
#include <string>

#include "formats/read_options.h"
#include "worker/common/data_shape.h"
#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker::python {

// Whether this build embeds Python (Python's development files, libtorch_python and
// pybind11's headers were found).
bool Available();

// The Python found at build time (the one whose torch is this LibTorch), unless
// $STOKE_PYTHON names another.
std::string DefaultExecutable();

// Starts the interpreter and imports torch (and, where they will be used, torch.compile's
// modules); once per process. Throws std::runtime_error naming what failed (or that this
// build has no Python).
void Start(const std::string& executable);

// BuildNetwork (models/model_factory.h), with model.python built by the user's factory.
std::shared_ptr<Network> BuildNetwork(const ModelConfig& config, const DataShape& data,
                                      const data::ReadOptions& files);

}  // namespace stoke::worker::python
