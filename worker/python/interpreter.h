// The CPython embedded in the trainer process. It runs the torch package of the very
// LibTorch this process links (libtorch_python joins them), so a tensor made in Python is
// an at::Tensor here and the other way round: no copies, no second framework. Only the
// files of worker/python include Python.h, and only through this header.
//
// The GIL: the interpreter starts on the calling thread, imports torch and lets the GIL
// go; from then on any thread that calls into Python holds a Gil for exactly that long.
// Loader threads never take it, and neither does autograd's backward from C++ (a
// Python-defined backward, torch.compile's included, takes it on autograd's own thread).
#pragma once

// First: Python.h must come before any system header.
#include <torch/csrc/python_headers.h>

#include <string>
#include <utility>

namespace stoke::worker::python {

// Starts the interpreter of `executable` (its installation and virtual environment, so
// its site-packages and torch), imports torch and releases the GIL. Once per process;
// later calls do nothing. Throws std::runtime_error naming what failed.
void StartInterpreter(const std::string& executable);
bool InterpreterStarted();

// Holds the GIL for its scope, on any thread.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// An owned reference; destroy or reset it with the GIL held.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(PyObject* owned) : object_(owned) {}
  ~PyRef() { Py_XDECREF(object_); }
  PyRef(PyRef&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
  PyRef& operator=(PyRef&& other) noexcept {
    if (this != &other) {
      Py_XDECREF(object_);
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;

  PyObject* get() const { return object_; }
  explicit operator bool() const { return object_ != nullptr; }

 private:
  PyObject* object_ = nullptr;
};

// Throws the pending Python exception (clearing it) as a UserCodeError whose message is
// "<context>: <Type>: <message>" and whose traceback is Python's own. With the GIL held.
[[noreturn]] void ThrowPythonError(const std::string& context);

// str(object), or a placeholder when that fails. With the GIL held.
std::string Str(PyObject* object);

}  // namespace stoke::worker::python
