"""Job specs from dicts and job files, read by the coordinator with the CLI's grammar: the
format, and problems that name the field, all of them at once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import stoke
from stoke.job_spec import validate_request
from stoke.v1 import job_spec_pb2


def read(client: stoke.Client, spec) -> job_spec_pb2.JobSpec:
    """The spec as the coordinator read it, whatever the rules say of it."""
    response = client._stub.ValidateJob(validate_request(spec), metadata=client._metadata)
    grammar = [p for p in response.problems if "unknown" in p.message or "expected" in p.message]
    assert not grammar, grammar
    return response.spec


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_short_enum_names_in_any_case_and_oneof_kinds_by_key(idle_client: stoke.Client) -> None:
    spec = read(idle_client, 
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


def test_switches_read_on_and_off_and_only_true_false_are_booleans(tmp_path: Path, idle_client: stoke.Client) -> None:
    path = write(tmp_path, "training: {cuda_graph: on, tf32: OFF, fused_kernels: default}\n")
    training = read(idle_client, path).training
    assert training.cuda_graph == job_spec_pb2.SWITCH_ON
    assert training.tf32 == job_spec_pb2.SWITCH_OFF
    assert training.fused_kernels == job_spec_pb2.SWITCH_DEFAULT
    assert read(idle_client, {"training": {"tf32": False}}).training.tf32 == job_spec_pb2.SWITCH_OFF
    assert read(idle_client, write(tmp_path, "data: {augment: {horizontal_flip: True}}\n", "t.yaml")).data.augment.horizontal_flip
    with pytest.raises(stoke.InvalidSpec, match='expected true or false, got "yes"'):
        idle_client.read_job_spec(write(tmp_path, "data: {augment: {horizontal_flip: yes}}\n", "y.yaml"))


def test_empty_member_selects_it_with_defaults(idle_client: stoke.Client) -> None:
    spec = read(idle_client, {"model": {"mlp": None}, "optimizer": {"adamw": {}}})
    assert spec.model.WhichOneof("kind") == "mlp"
    assert spec.optimizer.WhichOneof("kind") == "adamw"


def test_batch_size_auto_sets_the_sibling_switch(idle_client: stoke.Client) -> None:
    spec = read(idle_client, {"training": {"batch_size": "auto", "effective_batch_size": 512}})
    assert spec.training.batch_size_auto
    assert spec.training.batch_size == 0
    assert spec.training.effective_batch_size == 512


def test_numbers_written_as_text_and_camel_case_keys(idle_client: stoke.Client) -> None:
    # YAML 1.1 reads 1e-3 (no dot) as a string; proto3 JSON names are accepted too.
    spec = read(idle_client, 
        {"optimizer": {"lr": "1e-3", "weightDecay": 0.01}, "maxRestarts": 0, "training": {"steps": "5"}}
    )
    assert spec.optimizer.lr == pytest.approx(1e-3)
    assert spec.optimizer.weight_decay == pytest.approx(0.01)
    assert spec.HasField("max_restarts") and spec.max_restarts == 0
    assert spec.training.steps == 5


def test_job_file_resolves_data_paths_against_its_folder(tmp_path: Path, idle_client: stoke.Client) -> None:
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
    spec = read(idle_client, path)
    assert spec.name == "from-a-file"
    assert spec.data.mnist.path == str(tmp_path / "data" / "fashion")
    assert spec.optimizer.WhichOneof("kind") == "adamw"
    assert spec.optimizer.lr == pytest.approx(1e-3)
    # As a str too, and absolute paths stay as they are.
    absolute = write(tmp_path, "data: {mnist: {path: /srv/data}}\n", "abs.yaml")
    assert read(idle_client, str(absolute)).data.mnist.path == "/srv/data"


def test_the_repositorys_example_job_files_parse(idle_client: stoke.Client) -> None:
    examples = Path(__file__).resolve().parents[3] / "examples"
    files = sorted(examples.glob("*.yaml"))
    assert files, examples
    for path in files:
        spec = read(idle_client, path)
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
def test_bad_values_name_the_field(
    spec: dict, field: str, problem: str, idle_client: stoke.Client
) -> None:
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.read_job_spec(spec)
    assert caught.value.field == field
    assert problem in str(caught.value)
    assert [p.field for p in caught.value.problems][0] == field
    assert isinstance(caught.value, ValueError)


def test_errors_in_a_job_file_name_the_file_and_line(tmp_path: Path, idle_client: stoke.Client) -> None:
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
        idle_client.read_job_spec(path)
    assert caught.value.field == "training.batchsize"
    first, *rest = str(caught.value).splitlines()
    assert first == f"{path}:6:3: training.batchsize: unknown field; did you mean batch_size?"
    # The rules' problems follow, each naming the file: this job names no data.
    assert f"{path}: data: required: set one of synthetic" in rest[0]
    problem = caught.value.problems[0]
    assert (problem.line, problem.column) == (6, 3)


def test_every_problem_comes_at_once_each_placed_in_the_file(
    tmp_path: Path, idle_client: stoke.Client
) -> None:
    # Two grammar problems, a duplicate key, and rule problems in three sections: one
    # answer names them all, where the file wrote each.
    path = write(
        tmp_path,
        """        name: four-problems
        model:
          mlp: {hidden: [8], dropout: 2}
        data: {synthetic: {features: 8}}
        optimizer: {lr: 50}
        training:
          steps: 0
          bach_size: 32
          precision: fp8
        checkpoint: {keep: 1}
        checkpoint: {keep: 2}
        """,
    )
    problems = idle_client.validate(path)
    found = {(p.field, p.line) for p in problems}
    assert ("training.bach_size", 8) in found
    assert ("training.precision", 9) in found
    assert any("given twice" in p.message and p.line == 11 for p in problems), problems
    assert ("model.mlp.dropout", 3) in found
    assert ("optimizer.lr", 5) in found
    assert ("training.steps", 7) in found
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.submit(path)
    assert len(caught.value.problems) == len(problems)
    assert len(str(caught.value).splitlines()) == len(problems)
    # Nothing was stored.
    assert not [job for job in idle_client.list() if job.spec.name == "four-problems"]
    # A valid job has none.
    assert idle_client.validate({"model": {"mlp": {}}, "data": {"synthetic": {}}, "training": {"steps": 1}}) == []


def test_unreadable_and_malformed_files(tmp_path: Path, idle_client: stoke.Client) -> None:
    with pytest.raises(FileNotFoundError):
        idle_client.read_job_spec(tmp_path / "missing.yaml")
    with pytest.raises(stoke.InvalidSpec, match="the file is empty"):
        idle_client.read_job_spec(write(tmp_path, "", "empty.yaml"))
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.read_job_spec(write(tmp_path, "model: {mlp: [\n", "broken.yaml"))
    assert "not valid YAML or JSON" in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "broken.yaml:"))


def test_a_jobspec_message_passes_through_and_other_types_are_refused(idle_client: stoke.Client) -> None:
    message = job_spec_pb2.JobSpec(name="as is")
    assert idle_client.read_job_spec(message) is message
    with pytest.raises(TypeError):
        idle_client.read_job_spec(42)  # type: ignore[arg-type]


def test_a_data_root_path_is_left_for_the_coordinator(tmp_path: Path, idle_client: stoke.Client) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: {gpt: {}}\ndata:\n  tokens: {train_path: data:text.bin, val_path: v.bin}\n")
    spec = read(idle_client, str(job))
    assert spec.data.tokens.train_path == "data:text.bin"
    assert spec.data.tokens.val_path == str(tmp_path / "v.bin")
