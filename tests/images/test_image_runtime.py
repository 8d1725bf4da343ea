"""themis_testing.image_runtime: how a pod's container becomes a `buildah run` (the pure part).

The process side (buildah from/run against real images) runs in `make image-e2e`.
"""

from __future__ import annotations

from themis_testing.image_runtime import (
    ContainerSpec,
    ImageConfig,
    Mount,
    argv,
    container_env,
    hosts_text,
    run_argv,
)

IMAGE = ImageConfig(
    entrypoint=["themis-shard"],
    cmd=["--serve"],
    env={"PATH": "/opt/themis/bin:/usr/bin", "THEMIS_PORT": "8080", "THEMIS_HOST": "0.0.0.0"},
    workdir="/home/themis",
    user="1000:1000",
)


def test_command_and_args_follow_kubernetes():
    assert argv(IMAGE, None, None) == ["themis-shard", "--serve"]
    assert argv(IMAGE, None, ["--other"]) == ["themis-shard", "--other"]
    assert argv(IMAGE, None, []) == ["themis-shard"]
    assert argv(IMAGE, ["python", "-m", "x"], None) == ["python", "-m", "x"]  # command drops CMD
    assert argv(IMAGE, ["python"], ["-V"]) == ["python", "-V"]


def test_the_spec_env_wins_and_wildcard_addresses_become_the_containers_own():
    env = container_env(IMAGE, {"THEMIS_PORT": "9000", "OTHER_HOST": "::"}, "127.0.0.7")
    assert env["THEMIS_PORT"] == "9000" and env["PATH"] == "/opt/themis/bin:/usr/bin"
    assert env["THEMIS_HOST"] == env["OTHER_HOST"] == env["POD_IP"] == "127.0.0.7"


def test_run_argv_is_a_chroot_run_on_the_host_network_as_the_images_user():
    spec = ContainerSpec(
        name="pod-0",
        image="localhost/themis-shard:cpu",
        bind_address="127.0.0.7",
        env={"A": "1"},
        mounts=[Mount("/tmp/d", "/data"), Mount("/tmp/p", "/etc/themis/plan", read_only=True)],
    )
    cmd = run_argv(["buildah", "--storage-driver", "vfs"], spec, IMAGE)
    assert cmd[:8] == [
        "buildah",
        "--storage-driver",
        "vfs",
        "run",
        "--isolation",
        "chroot",
        "--network",
        "host",
    ]
    assert "A=1" in cmd and "THEMIS_HOST=127.0.0.7" in cmd
    mounts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--mount"]
    assert mounts == [
        "type=bind,source=/etc/hosts,destination=/etc/hosts,ro",
        "type=bind,source=/tmp/d,destination=/data,rw",
        "type=bind,source=/tmp/p,destination=/etc/themis/plan,ro",
    ]
    assert cmd[cmd.index("--user") + 1] == "1000:1000"
    assert cmd[cmd.index("--workingdir") + 1] == "/home/themis"
    assert cmd[-4:] == ["pod-0", "--", "themis-shard", "--serve"]


def test_a_hosts_file_of_the_callers_replaces_the_hosts():
    spec = ContainerSpec(name="p", image="i", bind_address="127.0.0.7", hosts_file="/tmp/hosts")
    assert "type=bind,source=/tmp/hosts,destination=/etc/hosts,ro" in run_argv(["buildah"], spec, IMAGE)


def test_hosts_text_puts_every_name_of_an_address_on_one_line():
    text = hosts_text({"a-0.a.default.svc": "127.0.0.7", "a-0.a": "127.0.0.7", "b-0.b": "127.0.0.8"})
    assert text.splitlines() == [
        "127.0.0.1 localhost",
        "::1 localhost ip6-localhost ip6-loopback",
        "127.0.0.7 a-0.a.default.svc a-0.a",
        "127.0.0.8 b-0.b",
    ]


def test_image_config_reads_buildahs_inspect_output():
    data = {
        "OCIv1": {
            "config": {
                "Entrypoint": ["themis-operator"],
                "Cmd": ["--all-namespaces"],
                "Env": ["PATH=/opt/themis/bin:/usr/bin", "EMPTY="],
                "WorkingDir": "/home/themis",
                "User": "1000:1000",
            }
        }
    }
    config = ImageConfig.from_inspect(data)
    assert config.entrypoint == ["themis-operator"] and config.cmd == ["--all-namespaces"]
    assert config.env == {"PATH": "/opt/themis/bin:/usr/bin", "EMPTY": ""}
    assert (config.workdir, config.user) == ("/home/themis", "1000:1000")
    assert ImageConfig.from_inspect({}).workdir == "/"
