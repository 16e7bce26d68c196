"""Stoke's side of a Python model, run in the trainer's embedded interpreter
(worker/python/python_model.cc calls these functions; the file is compiled into the
trainer). It imports the user's code and builds the model, lists its tensors, makes its
loss, compiles it and counts its FLOPs. Plain PyTorch, no state of its own: the training
loop, the optimizer and the data stay in C++.
"""
import importlib
import json
import os
import sys
import time

import torch
import torch.nn.functional as F


def preload():
    """What a job's first compile and FLOP count would import, imported ahead of any job
    (the trainer is started before its task): torch.compile's machinery where it will be
    used, and the FLOP counter."""
    try:
        if hasattr(torch, "compile") and torch.cuda.is_available():
            import torch._dynamo  # noqa: F401
            import torch._inductor.compile_fx  # noqa: F401
        import torch.utils.flop_counter  # noqa: F401
    except ImportError:
        pass  # what is missing is imported, or found missing, when a job needs it


def build(code_dir, module_name, factory_name, args_json):
    """factory(**args) from the user's module, imported from code_dir."""
    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    module = importlib.import_module(module_name)
    factory = module
    for part in factory_name.split("."):
        if not hasattr(factory, part):
            raise AttributeError(
                f"model.python.factory: module {module_name} has no {factory_name}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise TypeError(f"model.python.factory: {module_name}.{factory_name} is not callable")
    args = json.loads(args_json) if args_json else {}
    model = factory(**args)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model.python.factory: {factory_name}(...) returned a "
                        f"{type(model).__name__}, not a torch.nn.Module")
    return model


def tensors(model):
    """(parameters, buffers), each a list of (name, tensor) listing every tensor once
    however often the module shares it. Frozen parameters (requires_grad False) go with
    the buffers: they move and are saved with the model, but are not trained."""
    parameters, buffers = [], []
    for name, parameter in model.named_parameters():
        (parameters if parameter.requires_grad else buffers).append((name, parameter))
    for name, buffer in model.named_buffers():
        buffers.append((name, buffer))
    return parameters, buffers


def convolutional(model):
    """Whether the model convolves images: then it runs faster in channels_last."""
    kinds = (torch.nn.Conv2d, torch.nn.ConvTranspose2d)
    return any(isinstance(m, kinds) for m in model.modules())


def loss_function(model, kind):
    """The training objective of (inputs, targets): the model's own ("model"), or
    cross-entropy or MSE of its outputs, in fp32 as Stoke's C++ loss computes them."""
    if kind == "model":
        def loss(inputs, targets):
            return model(inputs, targets)
    elif kind == "mse":
        def loss(inputs, targets):
            return F.mse_loss(model(inputs).float(), targets.float())
    else:
        def loss(inputs, targets):
            outputs = model(inputs)
            return F.cross_entropy(outputs.float().reshape(-1, outputs.shape[-1]),
                                   targets.reshape(-1))
    return loss


def can_compile():
    return hasattr(torch, "compile")


def compiled(function, mode):
    """torch.compile with static shapes: batches keep one shape (partial ones are
    dropped), and Stoke captures the whole step as a CUDA graph itself, so the mode never
    makes graphs of its own."""
    return torch.compile(function, mode=mode, dynamic=False)


def count_flops(loss, inputs, targets):
    """FLOPs of one forward and backward of `loss` on this batch, by PyTorch's FLOP
    counter; None where this torch has none (before 2.1)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    with FlopCounterMode(display=False) as counter:
        loss(inputs, targets).backward()
    return counter.get_total_flops()


def prepare(model, eager_loss, compiled_loss, inputs, targets, flops_samples):
    """The one-time work of a model's first calls, on a batch shaped like the data's:
    the FLOP count (eager, on flops_samples samples) and torch.compile's tracing and code
    generation (a forward and backward of compiled_loss on the whole batch). Buffers
    (batch-norm statistics), gradients and the random generators are left as they were,
    so that training starts where it would have without this. Returns (FLOPs or None,
    seconds spent compiling)."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    trained = [p for p in model.parameters() if p.requires_grad]
    devices = [inputs.device.index or 0] if inputs.is_cuda else []
    with torch.random.fork_rng(devices=devices):
        flops = count_flops(eager_loss, inputs[:flops_samples], targets[:flops_samples])
        for p in trained:
            p.grad = None
        seconds = 0.0
        if compiled_loss is not None:
            began = time.perf_counter()
            compiled_loss(inputs, targets).backward()
            if inputs.is_cuda:
                torch.cuda.synchronize(inputs.device)
            seconds = time.perf_counter() - began
            for p in trained:
                p.grad = None
    with torch.no_grad():
        for buffer, value in saved:
            buffer.copy_(value)
    return flops, seconds


# safetensors' names of the dtypes it stores.
_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def write_safetensors(tensors, path):
    """The safetensors format: 8 bytes of little-endian header length, the JSON header
    (each tensor's dtype, shape and byte range; padded with spaces to 8 bytes), then the
    tensors' bytes one after another. Written here: the package is not always installed."""
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in chunks:
            f.write(data)


def export(model, directory):
    """Beside a checkpoint: state_dict.pt, which model.load_state_dict(torch.load(path))
    takes, and model.safetensors with the same tensors. On the CPU, so that they load on
    any machine."""
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    torch.save(state, os.path.join(directory, "state_dict.pt"))
    write_safetensors({name: tensor for name, tensor in state.items()
                       if tensor.dtype in _SAFETENSORS_DTYPES},
                      os.path.join(directory, "model.safetensors"))
