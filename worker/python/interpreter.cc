#include "worker/python/interpreter.h"

#include <mutex>
#include <stdexcept>

#include "worker/common/user_code_error.h"

namespace stoke::worker::python {
namespace {

std::once_flag start_once;
bool started = false;

std::string StatusMessage(const PyStatus& status) {
  std::string message = status.err_msg != nullptr ? status.err_msg : "unknown failure";
  if (status.func != nullptr) message = std::string(status.func) + ": " + message;
  return message;
}

void Start(const std::string& executable) {
  if (Py_IsInitialized()) {
    started = true;
    return;
  }
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // The trainer handles its own signals; Python's SIGINT handler would turn a stop into a
  // KeyboardInterrupt inside the user's forward.
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  // The user's print() reaches the job's log as it happens, not when a buffer fills.
  config.buffered_stdio = 0;
  // As if `executable` ran: its prefix, and its virtual environment's site-packages (a
  // pyvenv.cfg beside it), are what sys.path holds; sys.executable names it, which
  // torch.compile's worker processes are started with.
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable.c_str());
  if (!PyStatus_Exception(status)) {
    status = PyConfig_SetBytesString(&config, &config.executable, executable.c_str());
  }
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    throw std::runtime_error("cannot start the Python of " + executable + ": " +
                             StatusMessage(status));
  }
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr) {
    try {
      ThrowPythonError("cannot import torch in the Python of " + executable);
    } catch (const UserCodeError& e) {
      throw std::runtime_error(std::string(e.what()) +
                               " (the worker's Python models need the torch package of the "
                               "LibTorch it was built with)");
    }
  }
  Py_DECREF(torch);
  started = true;
  // From here on, threads take the GIL when they call into Python (Gil).
  PyEval_SaveThread();
}

// "<Type>: <message>" of an exception object.
std::string Summary(PyObject* error) {
  const std::string type = Py_TYPE(error)->tp_name;
  const std::string message = Str(error);
  return message.empty() ? type : type + ": " + message;
}

// Python's own rendering of the exception, with its traceback.
std::string Traceback(PyObject* error) {
  PyRef module(PyImport_ImportModule("traceback"));
  if (!module) {
    PyErr_Clear();
    return "";
  }
  PyRef traceback(PyException_GetTraceback(error));
  PyRef lines(PyObject_CallMethod(module.get(), "format_exception", "OOO",
                                  reinterpret_cast<PyObject*>(Py_TYPE(error)), error,
                                  traceback ? traceback.get() : Py_None));
  if (!lines) {
    PyErr_Clear();
    return "";
  }
  PyRef empty(PyUnicode_FromString(""));
  PyRef joined(PyUnicode_Join(empty.get(), lines.get()));
  if (!joined) {
    PyErr_Clear();
    return "";
  }
  return Str(joined.get());
}

}  // namespace

void StartInterpreter(const std::string& executable) {
  std::call_once(start_once, [&] { Start(executable); });
  if (!started) throw std::runtime_error("the Python interpreter failed to start earlier");
}

bool InterpreterStarted() { return started; }

std::string Str(PyObject* object) {
  PyRef text(PyObject_Str(object));
  if (!text) {
    PyErr_Clear();
    return "<unprintable>";
  }
  const char* utf8 = PyUnicode_AsUTF8(text.get());
  if (utf8 == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  return utf8;
}

void ThrowPythonError(const std::string& context) {
  PyObject* error = nullptr;
#if PY_VERSION_HEX >= 0x030C0000
  error = PyErr_GetRaisedException();
#else
  PyObject *type = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &error, &traceback);
  PyErr_NormalizeException(&type, &error, &traceback);
  if (error != nullptr && traceback != nullptr) PyException_SetTraceback(error, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
#endif
  if (error == nullptr) throw UserCodeError(context + ": failed without a Python exception", "");
  PyRef owned(error);
  throw UserCodeError(context + ": " + Summary(error), Traceback(error));
}

}  // namespace stoke::worker::python
