"""Checks a job's exports as a user of them would, with PyTorch alone: prints one line and
exits non-zero on any mismatch.

    check_exports.py state_dict MODEL_FILE ARGS_JSON STATE_DICT SAFETENSORS
        build_model(**args) from MODEL_FILE takes the state_dict (strictly), and the
        safetensors file, read by the format's specification, holds the same tensors.
    check_exports.py torchscript SCRIPTED ARCHIVE
        the scripted module loads and runs, and its parameters are the checkpoint's trained
        ones (ARCHIVE: the checkpoint's LibTorch archive, model.pt).
"""
import importlib.util
import json
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
          "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    header.pop("__metadata__", None)
    data = blob[8 + size:]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8)
        tensors[name] = raw.view(DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


def check_state_dict(model_file, args, state_dict, safetensors):
    spec = importlib.util.spec_from_file_location("user_model", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model(**json.loads(args))
    state = torch.load(state_dict)
    model.load_state_dict(state)  # strict: every key, no stranger
    stored = read_safetensors(safetensors)
    assert set(stored) == set(state), (sorted(stored), sorted(state))
    for name, tensor in state.items():
        assert torch.equal(stored[name], tensor), name
    print(f"ok: {len(state)} tensors load into build_model() and match the safetensors file")


def check_torchscript(scripted, archive):
    exported = torch.jit.load(scripted)
    trained = dict(torch.jit.load(archive).named_parameters())
    compared = 0
    for name, parameter in exported.named_parameters():
        key = name.replace(".", "_")
        assert key in trained, (key, sorted(trained))
        assert torch.equal(parameter.detach().cpu(), trained[key].detach().cpu()), name
        compared += 1
    assert compared > 0
    exported.eval()
    print(f"ok: {compared} trained parameters; forward gives {tuple(exported(torch.randn(4, 16)).shape)}")


if __name__ == "__main__":
    {"state_dict": check_state_dict, "torchscript": check_torchscript}[sys.argv[1]](*sys.argv[2:])
