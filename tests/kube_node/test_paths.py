"""The pod's file system model: container paths mapped to host paths."""

from themis_testing.kube_node.paths import PathMap

PATHS = PathMap(
    rootfs="/node/pods/ns/demo-0/rootfs",
    mounts={
        "/data": "/node/volumes/ns/data-demo-0-1234",
        "/etc/themis/plan": "/node/pods/ns/demo-0/volumes/plan",
        "/dev/termination-log": "/node/pods/ns/demo-0/termination-log",
    },
    image_prefixes={"/opt/themis": "/venv"},
)


def test_mounts_then_the_image_prefix_then_host_system_dirs_then_the_private_root():
    assert PATHS.host("/data") == "/node/volumes/ns/data-demo-0-1234"
    assert PATHS.host("/data/shard/x.sst") == "/node/volumes/ns/data-demo-0-1234/shard/x.sst"
    assert PATHS.host("/etc/themis/plan/plan.json") == "/node/pods/ns/demo-0/volumes/plan/plan.json"
    assert PATHS.host("/dev/termination-log") == "/node/pods/ns/demo-0/termination-log"
    assert PATHS.host("/opt/themis/bin/themis-shard") == "/venv/bin/themis-shard"
    assert PATHS.host("/usr/bin/python3") == "/usr/bin/python3"
    # What the image does not provide is not taken from the host: an unmounted /models is empty.
    assert PATHS.host("/models/model.gguf") == "/node/pods/ns/demo-0/rootfs/models/model.gguf"
    assert PATHS.host("/etc/themis/other") == "/node/pods/ns/demo-0/rootfs/etc/themis/other"
    assert PATHS.host("/database") == "/node/pods/ns/demo-0/rootfs/database"  # not under /data


def test_env_values_that_are_paths_or_path_lists_are_mapped_and_nothing_else():
    got = PATHS.env(
        {
            "THEMIS_DATA_DIR": "/data",
            "PATH": "/opt/themis/bin:/usr/bin",
            "THEMIS_HOST": "127.1.2.3",
            "URL": "https://x/v1",
            "EMPTY": "",
        }
    )
    assert got == {
        "THEMIS_DATA_DIR": "/node/volumes/ns/data-demo-0-1234",
        "PATH": "/venv/bin:/usr/bin",
        "THEMIS_HOST": "127.1.2.3",
        "URL": "https://x/v1",
        "EMPTY": "",
    }
