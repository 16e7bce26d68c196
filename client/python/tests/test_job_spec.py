"""Job specs from dicts and job files: the CLI's format, and errors that name the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import stoke
from stoke.v1 import job_spec_pb2


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_short_enum_names_in_any_case_and_oneof_kinds_by_key() -> None:
    spec = stoke.load_job_spec(
        {
            "model": {"mlp": {"hidden": [64, 32], "activation": "ReLU"}},
            "data": {"synthetic": {"features": 8}},
            "optimizer": {"sgd": {"momentum": 0.9}, "lr": 0.1, "schedule": "COSINE"},
            "training": {"steps": 10, "precision": "bf16", "cuda_graph": "SWITCH_OFF"},
        }
    )
    assert spec.model.WhichOneof("kind") == "mlp"
    assert list(spec.model.mlp.hidden) == [64, 32]
    assert spec.model.mlp.activation == job_spec_pb2.ACTIVATION_RELU
    assert spec.data.WhichOneof("kind") == "synthetic"
    assert spec.optimizer.WhichOneof("kind") == "sgd"
    assert spec.optimizer.schedule == job_spec_pb2.LR_SCHEDULE_COSINE
    assert spec.training.precision == job_spec_pb2.PRECISION_BF16
    assert spec.training.cuda_graph == job_spec_pb2.SWITCH_OFF
    assert spec.training.WhichOneof("length") == "steps"


def test_switches_read_on_and_off_and_only_true_false_are_booleans(tmp_path: Path) -> None:
    path = write(tmp_path, "training: {cuda_graph: on, tf32: OFF, fused_kernels: default}\n")
    training = stoke.load_job_spec(path).training
    assert training.cuda_graph == job_spec_pb2.SWITCH_ON
    assert training.tf32 == job_spec_pb2.SWITCH_OFF
    assert training.fused_kernels == job_spec_pb2.SWITCH_DEFAULT
    assert stoke.load_job_spec({"training": {"tf32": False}}).training.tf32 == job_spec_pb2.SWITCH_OFF
    assert stoke.load_job_spec(write(tmp_path, "data: {augment: {horizontal_flip: True}}\n", "t.yaml")).data.augment.horizontal_flip
    with pytest.raises(stoke.InvalidSpec, match='expected true or false, got "yes"'):
        stoke.load_job_spec(write(tmp_path, "data: {augment: {horizontal_flip: yes}}\n", "y.yaml"))


def test_empty_member_selects_it_with_defaults() -> None:
    spec = stoke.load_job_spec({"model": {"mlp": None}, "optimizer": {"adamw": {}}})
    assert spec.model.WhichOneof("kind") == "mlp"
    assert spec.optimizer.WhichOneof("kind") == "adamw"


def test_batch_size_auto_sets_the_sibling_switch() -> None:
    spec = stoke.load_job_spec({"training": {"batch_size": "auto", "effective_batch_size": 512}})
    assert spec.training.batch_size_auto
    assert spec.training.batch_size == 0
    assert spec.training.effective_batch_size == 512


def test_numbers_written_as_text_and_camel_case_keys() -> None:
    # YAML 1.1 reads 1e-3 (no dot) as a string; proto3 JSON names are accepted too.
    spec = stoke.load_job_spec(
        {"optimizer": {"lr": "1e-3", "weightDecay": 0.01}, "maxRestarts": 0, "training": {"steps": "5"}}
    )
    assert spec.optimizer.lr == pytest.approx(1e-3)
    assert spec.optimizer.weight_decay == pytest.approx(0.01)
    assert spec.HasField("max_restarts") and spec.max_restarts == 0
    assert spec.training.steps == 5


def test_job_file_resolves_data_paths_against_its_folder(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    path = write(
        tmp_path / "jobs",
        """\
        name: from-a-file
        model: {cnn: {channels: [8]}}
        data:
          mnist: {path: ../data/fashion}
        training: {epochs: 1, precision: fp32}
        optimizer:
          adamw:
          lr: 1e-3
        """,
    )
    spec = stoke.load_job_spec(path)
    assert spec.name == "from-a-file"
    assert spec.data.mnist.path == str(tmp_path / "data" / "fashion")
    assert spec.optimizer.WhichOneof("kind") == "adamw"
    assert spec.optimizer.lr == pytest.approx(1e-3)
    # As a str too, and absolute paths stay as they are.
    absolute = write(tmp_path, "data: {mnist: {path: /srv/data}}\n", "abs.yaml")
    assert stoke.load_job_spec(str(absolute)).data.mnist.path == "/srv/data"


def test_the_repositorys_example_job_files_parse() -> None:
    examples = Path(__file__).resolve().parents[3] / "examples"
    files = sorted(examples.glob("*.yaml"))
    assert files, examples
    for path in files:
        spec = stoke.load_job_spec(path)
        assert spec.name, path
        assert spec.model.WhichOneof("kind") is not None, path


@pytest.mark.parametrize(
    "spec, field, problem",
    [
        ({"training": {"batch_sise": 3}}, "training.batch_sise", "did you mean batch_size?"),
        ({"trainer": {}}, "trainer", "expected one of name, model"),
        ({"model": {"mlp": {}, "cnn": {}}}, "model.cnn", "conflicts with mlp"),
        ({"training": {"steps": -1}}, "training.steps", 'expected a whole number >= 0, got "-1"'),
        ({"training": {"steps": 2**64}}, "training.steps", "expected a whole number >= 0"),
        ({"training": {"precision": "fp8"}}, "training.precision", "expected one of auto, fp32, bf16"),
        ({"optimizer": {"lr": "fast"}}, "optimizer.lr", 'expected a number, got "fast"'),
        ({"optimizer": {"lr": float("nan")}}, "optimizer.lr", "expected a number"),
        ({"data": {"augment": {"horizontal_flip": "maybe"}}}, "data.augment.horizontal_flip", "true or false"),
        ({"model": {"mlp": {"hidden": 64}}}, "model.mlp.hidden", "expected a list"),
        ({"model": {"mlp": {"hidden": [64, "x"]}}}, "model.mlp.hidden[1]", 'got "x"'),
        ({"model": "mlp"}, "model", "expected a mapping of ModelSpec fields"),
    ],
)
def test_bad_values_name_the_field(spec: dict, field: str, problem: str) -> None:
    with pytest.raises(stoke.InvalidSpec) as caught:
        stoke.load_job_spec(spec)
    assert caught.value.field == field
    assert problem in str(caught.value)
    assert caught.value.code is None  # found before any call
    assert isinstance(caught.value, ValueError)


def test_errors_in_a_job_file_name_the_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        name: typo
        model:
          mlp: {hidden: [8]}
        training:
          steps: 10
          batchsize: 32
        """,
    )
    with pytest.raises(stoke.InvalidSpec) as caught:
        stoke.load_job_spec(path)
    assert caught.value.field == "training.batchsize"
    assert caught.value.source == f"{path}:6"
    assert str(caught.value) == f"{path}:6: training.batchsize: unknown field; did you mean batch_size?"


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        stoke.load_job_spec(tmp_path / "missing.yaml")
    with pytest.raises(stoke.InvalidSpec, match="the file is empty"):
        stoke.load_job_spec(write(tmp_path, "", "empty.yaml"))
    with pytest.raises(stoke.InvalidSpec) as caught:
        stoke.load_job_spec(write(tmp_path, "model: {mlp: [\n", "broken.yaml"))
    assert "not valid YAML or JSON" in str(caught.value)
    assert caught.value.source.startswith(str(tmp_path / "broken.yaml:"))


def test_a_jobspec_message_passes_through_and_other_types_are_refused() -> None:
    message = job_spec_pb2.JobSpec(name="as is")
    assert stoke.load_job_spec(message) is message
    with pytest.raises(TypeError):
        stoke.load_job_spec(42)  # type: ignore[arg-type]


def test_a_data_root_path_is_left_for_the_coordinator(tmp_path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: {gpt: {}}\ndata:\n  tokens: {train_path: data:text.bin, val_path: v.bin}\n")
    spec = stoke.load_job_spec(str(job))
    assert spec.data.tokens.train_path == "data:text.bin"
    assert spec.data.tokens.val_path == str(tmp_path / "v.bin")
