"""Job specs from dicts and YAML/JSON job files, mapped onto ``stoke.v1.JobSpec``.

The mapping is the ``stoke`` CLI's, so the same job files work in both:

- field names are the .proto's (snake_case; lowerCamelCase is accepted too);
- enum values may be written short and in any case (``precision: bf16`` for
  ``PRECISION_BF16``);
- the key chooses a oneof's member (``model: {mlp: {...}}``); two members of one oneof
  are an error; ``adamw:`` with nothing under it selects AdamW with its defaults;
- ``batch_size: auto`` sets the sibling ``batch_size_auto``;
- data and model paths in a job *file* are resolved against the file's own folder.

Anything else (an unknown field, a value of the wrong type) raises
:class:`~stoke.errors.InvalidSpec` naming the field, and the file and line when the spec
came from a file, before anything reaches the coordinator. The walk below checks and
normalises; ``google.protobuf.json_format.ParseDict`` then builds the message.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from stoke.errors import InvalidSpec
from stoke.v1 import job_spec_pb2

__all__ = ["SpecLike", "load_job_spec", "parse_job_spec", "resolve_relative_paths"]

SpecLike = Union[job_spec_pb2.JobSpec, Mapping[str, Any], str, "os.PathLike[str]"]

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


class _LineDict(dict):
    """A YAML mapping that remembers the line of each key, for error messages."""

    lines: Dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with mappings that know their keys' lines."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode):
    data = _LineDict()
    data.lines = {}
    yield data
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            key = str(key)
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key] = key_node.start_mark.line + 1


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.1 reads on/off/yes/no as booleans, which would turn `cuda_graph: off` (a Switch)
# into False. As in YAML 1.2 and the CLI's parser, only true and false are booleans here.
_BOOL_TAG = "tag:yaml.org,2002:bool"
_LineLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_LineLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _SpecWalker:
    """Checks a plain-data spec against JobSpec's descriptor and normalises it for ParseDict."""

    def __init__(self, source: Optional[str]) -> None:
        self._source = source

    def message(self, value: Any, descriptor: Descriptor, path: str, line: Optional[int]) -> dict:
        if value is None:  # "adamw:" with nothing under it: present, all defaults
            return {}
        if not isinstance(value, Mapping):
            raise self._error(
                path, line, f"expected a mapping of {descriptor.name} fields, got {_describe(value)}"
            )
        lines = getattr(value, "lines", {})
        out: Dict[str, Any] = {}
        oneofs_set: Dict[str, str] = {}
        for key, item in value.items():
            key_line = lines.get(key, line)
            field_path = f"{path}.{key}" if path else str(key)
            field = _find_field(descriptor, key)
            if field is None:
                raise self._error(field_path, key_line, _unknown_field(descriptor, str(key)))
            oneof = field.containing_oneof
            if oneof is not None and not _is_synthetic(oneof):
                if oneof.name in oneofs_set:
                    members = ", ".join(f.name for f in oneof.fields)
                    raise self._error(
                        field_path,
                        key_line,
                        f"conflicts with {oneofs_set[oneof.name]}: set only one of {members}",
                    )
                oneofs_set[oneof.name] = field.name
            if field.label != FieldDescriptor.LABEL_REPEATED and _is_auto(item):
                chooser = descriptor.fields_by_name.get(f"{field.name}_auto")
                if chooser is not None and chooser.type == FieldDescriptor.TYPE_BOOL:
                    out[chooser.name] = True
                    continue
            out[field.name] = self.field(item, field, field_path, key_line)
        return out

    def field(self, value: Any, field: FieldDescriptor, path: str, line: Optional[int]) -> Any:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            raise self._error(path, line, "map fields are not supported in job files")
        if field.label == FieldDescriptor.LABEL_REPEATED:
            if value is None:
                return []
            if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
                raise self._error(path, line, f"expected a list, got {_describe(value)}")
            return [self.single(v, field, f"{path}[{i}]", line) for i, v in enumerate(value)]
        return self.single(value, field, path, line)

    def single(self, value: Any, field: FieldDescriptor, path: str, line: Optional[int]) -> Any:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.full_name == "google.protobuf.Struct":
                if value is None:
                    return {}
                if not isinstance(value, Mapping):
                    raise self._error(path, line, f"expected a mapping, got {_describe(value)}")
                return self._plain(value, path, line)
            return self.message(value, field.message_type, path, line)
        if field.type == FieldDescriptor.TYPE_ENUM:
            return self._enum(value, field.enum_type, path, line)
        if field.type in _INT_RANGES:
            low, high = _INT_RANGES[field.type]
            number = _as_int(value)
            if number is None or not low <= number <= high:
                raise self._error(path, line, f"expected {_type_name(field)}, got {_describe(value)}")
            return number
        if field.type in _FLOATS:
            real = _as_float(value)
            if real is None:
                raise self._error(path, line, f"expected a number, got {_describe(value)}")
            return real
        if field.type == FieldDescriptor.TYPE_BOOL:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise self._error(path, line, f"expected true or false, got {_describe(value)}")
        if field.type == FieldDescriptor.TYPE_STRING:
            if isinstance(value, os.PathLike):
                return os.fspath(value)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                return str(value)
            raise self._error(path, line, f"expected a string, got {_describe(value)}")
        raise self._error(path, line, "unsupported field type")

    def _plain(self, value: Any, path: str, line: Optional[int]) -> Any:
        """A mapping of plain values (model.python.args), as JSON holds them."""
        if isinstance(value, Mapping):
            return {str(k): self._plain(v, f"{path}.{k}", line) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._plain(v, f"{path}[{i}]", line) for i, v in enumerate(value)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise self._error(path, line, f"expected a plain value, got {_describe(value)}")

    def _enum(self, value: Any, enum: EnumDescriptor, path: str, line: Optional[int]) -> str:
        if isinstance(value, bool):  # a Switch written as True / False in Python
            name = _enum_prefix(enum) + ("ON" if value else "OFF")
            if name in enum.values_by_name:
                return name
        elif isinstance(value, int):
            if value in enum.values_by_number:
                return enum.values_by_number[value].name
        elif isinstance(value, str):
            upper = value.strip().upper()
            for name in (upper, _enum_prefix(enum) + upper):
                if name in enum.values_by_name:
                    return name
        raise self._error(
            path, line, f"unknown value {_describe(value)}; expected one of {_enum_choices(enum)}"
        )

    def _error(self, path: str, line: Optional[int], problem: str) -> InvalidSpec:
        source = self._source
        if source is not None and line is not None:
            source = f"{source}:{line}"
        return InvalidSpec(problem, field=path or "(top level)", source=source)


def _is_synthetic(oneof: Any) -> bool:
    # proto3 `optional` fields sit in a synthetic oneof of their own; not a user choice.
    return len(oneof.fields) == 1 and oneof.name == f"_{oneof.fields[0].name}"


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _find_field(descriptor: Descriptor, key: Any) -> Optional[FieldDescriptor]:
    if not isinstance(key, str):
        return None
    field = descriptor.fields_by_name.get(key)
    if field is None:
        field = next((f for f in descriptor.fields if f.json_name == key), None)
    return field


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            return None
    return None


def _as_float(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        # YAML 1.1 reads "1e-3" (no dot) as a string; it is the number a user meant.
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _enum_prefix(enum: EnumDescriptor) -> str:
    """The prefix every value shares up to an underscore: ``PRECISION_`` for Precision."""
    names = [v.name for v in enum.values]
    prefix = os.path.commonprefix(names)
    cut = prefix.rfind("_")
    return prefix[: cut + 1] if cut >= 0 else ""


def _enum_choices(enum: EnumDescriptor) -> str:
    prefix = _enum_prefix(enum)
    names = [
        v.name[len(prefix):].lower() if v.name.startswith(prefix) else v.name.lower()
        for v in enum.values
        if not v.name.endswith("_UNSPECIFIED")
    ]
    return ", ".join(names)


def _type_name(field: FieldDescriptor) -> str:
    low, _ = _INT_RANGES[field.type]
    return "a whole number >= 0" if low == 0 else "an integer"


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"'


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            above = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1]))
            diagonal = above
    return row[len(b)]


def _unknown_field(descriptor: Descriptor, key: str) -> str:
    names = [f.name for f in descriptor.fields]
    closest = min(names, key=lambda n: _edit_distance(key, n))
    if _edit_distance(key, closest) <= 2:
        return f"unknown field; did you mean {closest}?"
    return f"unknown field; expected one of {', '.join(names)}"


def resolve_relative_paths(spec: job_spec_pb2.JobSpec, base_dir: Union[str, "os.PathLike[str]"]) -> None:
    """Makes the spec's data and model paths absolute, relative to ``base_dir``.

    The coordinator opens these paths itself, so a path relative to the job file's folder
    would mean nothing to it.
    """
    base = Path(base_dir).absolute()

    def resolve(path: str) -> str:
        # "data:REL" names REL beneath the coordinator's data roots: the coordinator's to find.
        if not path or os.path.isabs(path) or path.startswith("data:"):
            return path
        return os.path.normpath(str(base / path))

    data = spec.data
    kind = data.WhichOneof("kind")
    if kind == "mnist":
        data.mnist.path = resolve(data.mnist.path)
    elif kind == "cifar10":
        data.cifar10.path = resolve(data.cifar10.path)
    elif kind == "tokens":
        data.tokens.train_path = resolve(data.tokens.train_path)
        data.tokens.val_path = resolve(data.tokens.val_path)
    elif kind == "images":
        for field in ("path", "manifest", "val_path", "val_manifest"):
            setattr(data.images, field, resolve(getattr(data.images, field)))
    elif kind == "shards":  # braces are kept: the pattern is expanded where it is read
        for field in ("urls", "val_urls"):
            setattr(data.shards, field, resolve(getattr(data.shards, field)))
    elif kind == "arrays":  # "file.safetensors:tensor" keeps its tensor's name
        for field in ("inputs", "targets", "val_inputs", "val_targets"):
            setattr(data.arrays, field, resolve(getattr(data.arrays, field)))
    if spec.model.WhichOneof("kind") == "torchscript":
        spec.model.torchscript.path = resolve(spec.model.torchscript.path)
    if spec.model.WhichOneof("kind") == "python":
        spec.model.python.file = resolve(spec.model.python.file)
    if spec.HasField("command"):
        spec.command.workdir = resolve(spec.command.workdir)


def parse_job_spec(
    spec: Mapping[str, Any],
    *,
    source: Optional[str] = None,
    base_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> job_spec_pb2.JobSpec:
    """Builds a ``JobSpec`` from plain data (what a job file's YAML or JSON holds).

    Args:
        spec: e.g. ``{"model": {"mlp": {"hidden": [64]}}, "training": {"steps": 100}}``.
        source: names the spec's origin in error messages (a file path).
        base_dir: resolve relative data and model paths against this folder; by default
            they are sent as written.

    Raises:
        InvalidSpec: naming the field (and line, for YAML from a file) that is wrong.
    """
    normal = _SpecWalker(source).message(spec, job_spec_pb2.JobSpec.DESCRIPTOR, "", None)
    message = job_spec_pb2.JobSpec()
    try:
        json_format.ParseDict(normal, message)
    except json_format.ParseError as error:  # the walk should have caught it; say so anyway
        raise InvalidSpec(str(error), source=source) from error
    if base_dir is not None:
        resolve_relative_paths(message, base_dir)
    return message


def load_job_spec(spec: SpecLike) -> job_spec_pb2.JobSpec:
    """Turns what :meth:`stoke.Client.submit` accepts into a ``JobSpec`` message.

    Args:
        spec: a ``JobSpec`` (returned as is), a dict (see :func:`parse_job_spec`), or
            the path of a YAML or JSON job file, whose relative data and model paths are
            resolved against the file's folder (as ``stoke submit`` does).

    Raises:
        InvalidSpec: the spec is malformed; the error names the field and the file's line.
        FileNotFoundError: the job file does not exist.
    """
    if isinstance(spec, job_spec_pb2.JobSpec):
        return spec
    if isinstance(spec, Mapping):
        return parse_job_spec(spec)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        text = path.read_text()
        try:
            document = yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a safe loader)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            raise InvalidSpec(f"not valid YAML or JSON: {error}", source=where) from error
        if document is None:
            raise InvalidSpec("the file is empty", source=str(path))
        return parse_job_spec(document, source=str(path), base_dir=path.parent)
    raise TypeError(
        f"a job spec is a stoke.v1.JobSpec, a dict or a job file's path, not {type(spec).__name__}"
    )
