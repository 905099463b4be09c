"""The demo waits for the definitions it applies itself, not for every definition the cluster holds: one rejected
definition left over from earlier work must not fail it (``timed out after 60s waiting for ... to be Accepted``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from localcluster import demo, samples

SAMPLE_DEFINITIONS = [("applicationdefinitions", "postgres"), ("applicationdefinitions", "redis"),
                      ("tofuapplicationdefinitions", "s3bucket"), ("tofuapplicationdefinitions", "vpc")]


def test_the_samples_are_the_definitions_waited_for(tmp_path: Path) -> None:
    assert demo.applied_definitions(demo.sample_files("definitions")) == SAMPLE_DEFINITIONS
    # The local copies the demo applies name the same definitions.
    local = samples.local_definitions(tmp_path / "local", tmp_path / "tf-runner.kubeconfig")
    assert demo.applied_definitions(sorted(local.glob("*.yaml"))) == SAMPLE_DEFINITIONS


def test_only_definitions_count(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump_all([
        None,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-definition"}},
        {"apiVersion": "cozystack.io/v1alpha1", "kind": "TofuApplicationDefinition", "metadata": {"name": "b"}},
        {"apiVersion": "example.com/v1", "kind": "ApplicationDefinition", "metadata": {"name": "someone-elses"}},
        {"apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "a"}},
    ]))
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump({"apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
                                     "metadata": {"name": "a"}}))
    assert demo.applied_definitions([mixed, again]) == [("applicationdefinitions", "a"),
                                                        ("tofuapplicationdefinitions", "b")]
    assert demo.applied_definitions([]) == []


class FakeCluster:
    """kubectl against a cluster that already holds a rejected definition nobody in the demo applied."""

    LEFTOVER = ("tofuapplicationdefinitions", "leftover-rejected")

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.objects: dict[tuple[str, str], dict[str, Any]] = {self.LEFTOVER: self._definition(
            "TofuApplicationDefinition", self.LEFTOVER[1], accepted="False")}
        self.applied: list[str] = []

    @staticmethod
    def _definition(kind: str, name: str, accepted: str) -> dict[str, Any]:
        return {"apiVersion": "cozystack.io/v1alpha1", "kind": kind, "metadata": {"name": name},
                "status": {"conditions": [{"type": "Accepted", "status": accepted}]}}

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        out = ""
        if args[:2] == ("apply", "-f"):
            self.applied.append(Path(args[2]).name)
            for doc in yaml.safe_load_all(Path(args[2]).read_text()):
                key = (demo.DEFINITION_PLURALS[doc["kind"]], doc["metadata"]["name"])
                self.objects[key] = self._definition(doc["kind"], key[1], accepted="True")
        elif args[0] == "get" and args[-2:] == ("-o", "json"):
            what = args[1:-2]
            if len(what) == 1:
                out = json.dumps({"items": [obj for (plural, _), obj in self.objects.items() if plural == what[0]]})
            else:
                out = json.dumps(self.objects[(what[0], what[1])])
        elif args[0] == "api-resources":
            out = "s3buckets   tofu.apps.cozystack.io/v1alpha1   true   S3Bucket\n"
        return subprocess.CompletedProcess(["kubectl", *args], 0, out, "")


def test_a_rejected_leftover_does_not_hold_the_demo_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cluster = FakeCluster(tmp_path)
    monkeypatch.setattr(demo.flux, "state_kubeconfig", lambda _: tmp_path / "tf-runner.kubeconfig")
    waited: list[str] = []
    wait = demo.Demo.wait

    def recorded(self: demo.Demo, what: str, check: Any, timeout: float = 60) -> Any:
        waited.append(what)
        return wait(self, what, check, timeout=1)  # the leftover would otherwise fail it after 60 s

    monkeypatch.setattr(demo.Demo, "wait", recorded)
    demo.Demo(cast(Any, cluster), demo.Transcript()).definitions()
    assert cluster.applied == [p.name for p in demo.sample_files("definitions")]
    assert waited == [f"{plural}/{name} to be Accepted" for plural, name in SAMPLE_DEFINITIONS] + [
        "the new kinds in discovery"]
    capsys.readouterr()
