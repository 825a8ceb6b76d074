"""The multi-node examples of docs/examples/ pass their linters, with no cluster:
the SLURM script passes shellcheck, and the Kubeflow Trainer TrainJob manifest validates against
the TrainJob schema of Kubeflow Trainer v2.3.0's CRD (the subset it uses, vendored in
fixtures/kubeflow_trainjob_v1alpha1_v2.3.0.json, which says where it came from)."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import pytest

from scripts import REPO

EXAMPLES = REPO / "docs" / "examples"
SBATCH = EXAMPLES / "parbench-slurm.sbatch"
MANIFEST = EXAMPLES / "parbench-trainjob.yaml"
SCHEMA = REPO / "tests" / "python" / "fixtures" / "kubeflow_trainjob_v1alpha1_v2.3.0.json"
SHELLCHECK = shutil.which("shellcheck")
needs_shellcheck = pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (ci/setup.sh installs it)")


def shellcheck(path) -> subprocess.CompletedProcess:
    # Every severity, style included; --external-sources lets it follow sourced files if any.
    return subprocess.run([SHELLCHECK, "--severity=style", "--external-sources", str(path)],
                          capture_output=True, text=True)


@needs_shellcheck
@pytest.mark.parametrize("script", [SBATCH, REPO / "ci" / "gate-job.sh"], ids=lambda path: path.name)
def test_shell_scripts_pass_shellcheck(script):
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_shellcheck
def test_shellcheck_catches_what_it_should(tmp_path):
    """The check is not vacuous: the same call fails an sbatch script with an unquoted variable."""
    bad = tmp_path / "bad.sbatch"
    bad.write_text(SBATCH.read_text().replace('"$SLURM_JOB_NODELIST"', "$SLURM_JOB_NODELIST"))
    result = shellcheck(bad)
    assert result.returncode != 0 and "SC2086" in result.stdout, result.stdout


def test_sbatch_script_launches_as_the_docs_say():
    text = SBATCH.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "# Tested with: shellcheck" in text and "Not run on a SLURM\n# cluster" in text, "says what it was tested with"
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    command = re.sub(r"\\\n\s*", " ", text[text.index("\nsrun "):])
    assert re.search(r"^srun .*torchrun --no-python .*\./build/parbench ", command, re.M), command
    for flag in ('--nnodes="$SLURM_JOB_NUM_NODES"', '--nproc-per-node="$gpus_per_node"', "--rdzv-backend=c10d",
                 '--rdzv-endpoint="$head_node:$rdzv_port"', '--rdzv-id="$SLURM_JOB_ID"', "--benchmark_out_format=json",
                 '--benchmark_out="$results_dir/parbench.json"'):
        assert flag in command, flag
    assert re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M), "one torchrun agent per node"
    # NVLink multicast off, the variables parbench's own launcher sets (docs/DISTRIBUTED.md).
    for variable in ("NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"):
        assert f"\nexport {variable}\n" in text, variable
        assert variable in (REPO / "docs" / "DISTRIBUTED.md").read_text(), variable


# --- the TrainJob manifest ---------------------------------------------------------------------

def load_manifest(yaml):
    documents = [document for document in yaml.safe_load_all(MANIFEST.read_text()) if document is not None]
    assert len(documents) == 1
    return documents[0]


def strict(schema):
    """The CRD's schema as kubectl's strict field validation applies it: an object whose
    properties are listed admits no others (the API server would drop or refuse them)."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(value) for value in schema]
    return schema


@pytest.fixture(scope="module")
def check():
    """errors(document) -> the schema's error messages (with their paths) for a TrainJob document."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (ci/setup.sh installs it)")
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (ci/setup.sh installs it)")
    vendored = json.loads(SCHEMA.read_text())
    assert vendored["kubeflow_trainer_version"] == "v2.3.0" and vendored["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    schema = strict(vendored["openAPIV3Schema"])
    # The group, version and kind are the CRD's (the API server routes by them, its schema does
    # not list them as values); metadata.name's rules are the CRD's CEL rules, as patterns.
    rules = {rule["rule"] for rule in vendored["openAPIV3Schema"]["x-kubernetes-validations"]}
    assert rules == {"self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')", "size(self.metadata.name) <= 63"}
    schema["properties"]["apiVersion"]["const"] = vendored["apiVersion"]
    schema["properties"]["kind"]["const"] = vendored["kind"]
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    schema["properties"]["metadata"] = {
        "type": "object", "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                       "namespace": {"type": "string"}, "labels": {"type": "object"},
                       "annotations": {"type": "object"}},
        "additionalProperties": False}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator_class.check_schema(schema)
    validator = validator_class(schema)

    def errors(document):
        """(path, the schema keyword that failed, message) of each error: the keyword, not the
        message, which differs between jsonschema versions."""
        return [(".".join(map(str, error.absolute_path)) or "(root)", error.validator, error.message)
                for error in validator.iter_errors(document)]
    errors.manifest = load_manifest(yaml)
    return errors


def test_manifest_matches_the_trainjob_schema(check):
    assert check(check.manifest) == []


def test_manifest_runs_parbench_under_torchrun_on_the_torch_runtime(check):
    job = check.manifest
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                         "name": "torch-distributed"}
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "--no-python", "/opt/parbench/build/parbench"]
    assert "--strategies=ddp" in trainer["args"] and "--benchmark_out_format=json" in trainer["args"]
    assert isinstance(trainer["numNodes"], int) and trainer["numNodes"] >= 2
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] >= 1
    # Trainer's torch plugin refuses these in trainer.env (it sets them for torchrun itself).
    env = {variable["name"]: variable["value"] for variable in trainer["env"]}
    assert not {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"} & set(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    text = MANIFEST.read_text()
    assert "# Tested with: a schema check" in text and "Not applied to a cluster." in text, "says what it was tested with"
    dockerfile = (EXAMPLES / "Dockerfile").read_text()
    assert "# Tested with: " in dockerfile and "WORKDIR /opt/parbench" in dockerfile
    assert re.search(r"^FROM nvidia/cuda:[0-9.]+-[a-z-]*devel-ubuntu", dockerfile, re.M)
    assert "ARG TORCH_VERSION=2.11.0" in dockerfile
    assert "readonly TORCH_VERSION=2.11.0" in (REPO / "ci" / "setup.sh").read_text(), "the Dockerfile's pin follows setup.sh's"
    assert "bash ci/setup.sh && bash ci/build.sh" in dockerfile


def broken(manifest, change):
    document = copy.deepcopy(manifest)
    change(document)
    return document


@pytest.mark.parametrize("change, path, keyword", [
    (lambda job: job["spec"]["trainer"].__setitem__("numNodes", "2"), "spec.trainer.numNodes", "type"),
    (lambda job: job["spec"]["runtimeRef"].pop("name"), "spec.runtimeRef", "required"),
    (lambda job: job["spec"]["runtimeRef"].__setitem__("name", ""), "spec.runtimeRef.name", "minLength"),
    (lambda job: job["spec"].pop("runtimeRef"), "spec", "required"),
    (lambda job: job["spec"]["trainer"].__setitem__("numNode", 2), "spec.trainer", "additionalProperties"),
    (lambda job: job["spec"]["trainer"].__setitem__("command", "torchrun"), "spec.trainer.command", "type"),
    (lambda job: job["spec"]["trainer"]["resourcesPerNode"]["limits"].__setitem__("nvidia.com/gpu", "eight"),
     "spec.trainer.resourcesPerNode.limits.nvidia.com/gpu", "pattern"),
    (lambda job: job["spec"]["trainer"]["env"][0].pop("name"), "spec.trainer.env.0", "required"),
    (lambda job: job["metadata"].__setitem__("name", "Parbench_DDP"), "metadata.name", "pattern"),
    (lambda job: job.__setitem__("apiVersion", "kubeflow.org/v1"), "apiVersion", "const"),
], ids=["numNodes-string", "runtimeRef-no-name", "runtimeRef-empty-name", "no-runtimeRef", "misspelt-field",
        "command-string", "gpu-count-word", "env-without-name", "name-not-dns-label", "other-apiVersion"])
def test_schema_check_fails_a_broken_manifest(check, change, path, keyword):
    errors = check(broken(check.manifest, change))
    assert any(error[:2] == (path, keyword) for error in errors), errors
