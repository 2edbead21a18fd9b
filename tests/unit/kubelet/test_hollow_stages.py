"""Hollow stages like kwok's: which stage a pod's container matches, the file schema and its errors, and
the hollow runtime ending containers as the stage says (annotations still override)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kubelet_agent.cri.hollow import HollowRuntime
from kubelet_agent.cri.stages import default_stages, load_stages, parse_stages, select
from kubelet_agent.cri.types import CONTAINER_EXITED, CONTAINER_RUNNING, ContainerSpec, SandboxSpec


def pod(owner: str | None = "Job", policy: str = "Never", **meta: Any) -> dict[str, Any]:
    refs = [{"kind": owner, "name": "j", "uid": "1"}] if owner else []
    return {"metadata": {"name": "p", "uid": "u", "ownerReferences": refs, **meta},
            "spec": {"restartPolicy": policy, "containers": [{"name": "a"}, {"name": "b"}]}}


def test_default_stage_finishes_job_pods_only() -> None:
    stages = default_stages(1.5)
    stage = select(stages, pod(), "a")
    assert stage is not None and stage.behavior(stage.delay) == {"exit": "0", "after": "1.5"}
    assert select(stages, pod(policy="OnFailure"), "a") is not None
    assert select(stages, pod(owner="ReplicaSet"), "a") is None
    assert select(stages, pod(owner=None), "a") is None


def test_file_schema_and_first_match_wins(tmp_path: Path) -> None:
    path = tmp_path / "stages.yaml"
    path.write_text("""
apiVersion: pyk8s.io/v1alpha1
kind: HollowStages
stages:
- name: gpu-missing
  selector: {matchLabels: {gpu: "yes"}, containers: [b]}
  next: {startError: no GPU here}
- name: flaky
  selector: {ownerKinds: [Job], matchAnnotations: {flaky: "true"}}
  delay: 500ms
  jitter: 1s
  next: {exitCode: 3}
- name: forever
  selector: {}
""")
    stages = load_stages(str(path))
    assert [s.name for s in stages] == ["gpu-missing", "flaky", "forever"]
    gpu = pod(labels={"gpu": "yes"})
    assert select(stages, gpu, "b").behavior(0) == {"fail": "no GPU here"}  # type: ignore[union-attr]
    assert select(stages, gpu, "a").name == "forever"  # type: ignore[union-attr]
    flaky = select(stages, pod(annotations={"flaky": "true"}), "a")
    assert flaky is not None and (flaky.delay, flaky.jitter, flaky.exit_code) == (0.5, 1.0, 3)
    assert select(stages, pod(), "a").behavior(0) == {}  # type: ignore[union-attr]


@pytest.mark.parametrize(("doc", "error"), [
    ({"kind": "Stage", "stages": []}, "kind 'Stage' is not HollowStages"),
    ({"stages": {}}, "stages: expected a list"),
    ({"stages": [{"nxt": {}}]}, "stages[0]: unknown field 'nxt'"),
    ({"stages": [{"selector": {"ownerKind": ["Job"]}}]}, "stages[0].selector: unknown field 'ownerKind'"),
    ({"stages": [{"selector": {"ownerKinds": "Job"}}]}, "stages[0].selector.ownerKinds: expected a list"),
    ({"stages": [{"next": {"exitCode": 300}}]}, "stages[0].next.exitCode: expected an integer from 0 to 255"),
    ({"stages": [{"next": {"exitCode": 1, "startError": "x"}}]}, "exclusive"),
    ({"stages": [{"delay": "soon"}]}, 'stages[0].delay: time: invalid duration "soon"'),
])
def test_bad_files_name_the_field(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_stages(doc, "f.yaml")
    assert error in str(info.value) and str(info.value).startswith("f.yaml: ")


async def test_runtime_ends_app_containers_as_the_stage_says() -> None:
    runtime = HollowRuntime(stages=default_stages(0.05))
    pods = {"u": pod()}
    runtime.set_pod_lookup(pods.get)
    sandbox = SandboxSpec(name="p", namespace="ns", uid="u")
    sid = await runtime.run_sandbox(sandbox)
    a = await runtime.create_container(sid, ContainerSpec("a", "busybox"), sandbox)
    await runtime.start_container(a)
    scripted = SandboxSpec(name="p", namespace="ns", uid="u",
                           annotations={"hollow.pyk8s.io/container.b": "exit=4,after=0.05"})
    b = await runtime.create_container(sid, ContainerSpec("b", "busybox"), scripted)
    await runtime.start_container(b)
    assert (await runtime.container_status(a)).state == CONTAINER_RUNNING
    await asyncio.sleep(0.2)
    done_a, done_b = await runtime.container_status(a), await runtime.container_status(b)
    assert (done_a.state, done_a.exit_code, done_a.reason) == (CONTAINER_EXITED, 0, "Completed")
    assert (done_b.state, done_b.exit_code, done_b.reason) == (CONTAINER_EXITED, 4, "Error")
    # An ephemeral container (not among spec.containers) and a pod no stage matches run until stopped.
    debug = await runtime.create_container(sid, ContainerSpec("debug", "busybox"), sandbox)
    await runtime.start_container(debug)
    pods["u"] = pod(owner="ReplicaSet")
    c = await runtime.create_container(sid, ContainerSpec("a", "busybox", attempt=1), sandbox)
    await runtime.start_container(c)
    await asyncio.sleep(0.2)
    assert (await runtime.container_status(debug)).state == CONTAINER_RUNNING
    assert (await runtime.container_status(c)).state == CONTAINER_RUNNING
    await runtime.close()
