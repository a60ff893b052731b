"""deploy/kubernetes/sonde.yaml: the DaemonSet mounts every path its
ConfigMap's config makes the agent read or write, holds the capability the
profiler needs, and probes the admin site where the config puts it; the
ConfigMap's config is one `sonde validate` accepts."""

import fnmatch
import re
import subprocess
import tomllib
from pathlib import PurePosixPath

import pytest
import yaml

from conftest import ROOT, sonde_bin

MANIFEST = ROOT / "deploy" / "kubernetes" / "sonde.yaml"
UNIT = ROOT / "packaging" / "sonde.service"


@pytest.fixture(scope="module")
def docs():
    with open(MANIFEST) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s in {MANIFEST}"
    return found[0]


@pytest.fixture(scope="module")
def config_text(docs):
    return one(docs, "ConfigMap")["data"]["sonde.toml"]


@pytest.fixture(scope="module")
def pod(docs):
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def container(pod):
    (c,) = pod["containers"]
    return c


def mount_for(pod, path):
    """The volume mount that holds `path`, the deepest one, and its volume."""
    path = PurePosixPath(path)
    best = None
    for m in container(pod)["volumeMounts"]:
        mp = PurePosixPath(m["mountPath"])
        if path == mp or mp in path.parents:
            if best is None or len(mp.parts) > len(PurePosixPath(best["mountPath"]).parts):
                best = m
    assert best is not None, f"nothing mounts {path}"
    (volume,) = [v for v in pod["volumes"] if v["name"] == best["name"]]
    return best, volume


def test_the_configmaps_config_is_valid(config_text, tmp_path):
    path = tmp_path / "sonde.toml"
    path.write_text(config_text)
    out = subprocess.run([sonde_bin(), "validate", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_config_is_mounted_where_the_container_reads_it(docs, pod):
    c = container(pod)
    at = c["args"][c["args"].index("--config") + 1]
    m, volume = mount_for(pod, at)
    assert volume["configMap"]["name"] == one(docs, "ConfigMap")["metadata"]["name"]
    assert m.get("readOnly") is True
    assert PurePosixPath(at).name == "sonde.toml"


def test_every_path_the_config_reads_or_writes_is_mounted(config_text, pod):
    config = tomllib.loads(config_text)
    # The data_dir: checkpoints, disk buffers, profiles, kept across pod
    # restarts on the node.
    data_dir = config["agent"]["data_dir"]
    m, volume = mount_for(pod, data_dir)
    assert not m.get("readOnly"), "the data_dir must be writable"
    assert volume["hostPath"]["path"] == data_dir and m["mountPath"] == data_dir
    # Unix sockets: their directory writable, and the node's, so that
    # services' pods can mount it too.
    sockets = [r["listen"].split("://", 1)[1] for r in config["receivers"]
               if r["listen"].startswith(("unix", "unixgram", "unixseq"))]
    assert sockets, "the DaemonSet config offers a unix socket"
    for path in sockets:
        m, volume = mount_for(pod, PurePosixPath(path).parent)
        assert not m.get("readOnly") and "hostPath" in volume, path
    # Log files: the fixed part of each glob, read-only, from the node.
    for source in config["logs"]:
        for pattern in source["include"]:
            fixed = re.split(r"[*?\[{]", pattern, maxsplit=1)[0].rstrip("/")
            m, volume = mount_for(pod, fixed)
            assert m.get("readOnly") is True and "hostPath" in volume, pattern
    # /var/log/containers holds the kubelet's symlinks into /var/log/pods:
    # both are mounted, at the node's paths, so the links resolve.
    for path in ["/var/log/pods", "/var/log/containers"]:
        m, volume = mount_for(pod, path)
        assert m["mountPath"] == path == volume["hostPath"]["path"] and m["readOnly"]


def test_pod_logs_are_read_as_cri_with_the_kubelets_rotated_files(config_text):
    config = tomllib.loads(config_text)
    pods = [s for s in config["logs"]
            if any(p.startswith("/var/log/pods/") for p in s["include"])]
    assert pods, "a source reads /var/log/pods"
    for source in pods:
        assert source.get("format") == "cri", source
        # 0.log and the kubelet's 0.log.<timestamp>, so that a rotation
        # while the agent is down loses nothing.
        assert any(fnmatch.fnmatchcase("/var/log/pods/ns_pod_uid/app/0.log.20240102-030405", p)
                   for p in source["include"]), source["include"]


def test_the_profiler_sees_the_node_with_its_capability_and_no_more(config_text, pod):
    assert "profiler" in tomllib.loads(config_text)
    assert pod["hostPID"] is True
    sc = container(pod)["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    added = set(sc["capabilities"]["add"])
    assert "PERFMON" in added
    # The same set as the systemd unit grants, no more.
    unit = UNIT.read_text()
    granted = set(re.search(r"^AmbientCapabilities=(.*)$", unit, re.M).group(1).split())
    assert added == {c.removeprefix("CAP_") for c in granted}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc


def test_probes_reach_the_admin_site_on_loopback(config_text, pod):
    host, port = tomllib.loads(config_text)["agent"]["admin_listen"].rsplit(":", 1)
    assert host == "127.0.0.1", "the admin site stays on loopback"
    # The kubelet reaches the pod's loopback only in the node's network.
    assert pod["hostNetwork"] is True
    for probe in ["livenessProbe", "readinessProbe"]:
        get = container(pod)[probe]["httpGet"]
        assert (get["host"], str(get["port"]), get["path"]) == (host, port, "/health"), probe


def test_requests_and_limits_match_the_measured_figures(pod):
    resources = container(pod)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    limit = resources["limits"]["memory"]
    unit = UNIT.read_text()
    max_mb = re.search(r"^MemoryMax=(\d+)M$", unit, re.M).group(1)
    assert limit == f"{max_mb}Mi", "the pod's memory limit is the unit's MemoryMax"
