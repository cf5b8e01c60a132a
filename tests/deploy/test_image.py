"""The container image and the local compose stack, read (test_container.py builds and runs
the image): the Dockerfile builds with exactly `make release` (whose `--locked` build the
lockfile satisfies), runs as a non-root user with the ports and cache volume declared, and the
configuration the image and compose.yaml give Portico passes `portico check-config`.
"""

import os
import pathlib
import re
import shlex
import subprocess
import tempfile
import unittest

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PORTICO = os.environ.get("PORTICO_BIN", str(ROOT / "target" / "debug" / "portico"))


def stages(dockerfile):
    """The Dockerfile's instructions (continuations joined) grouped by FROM stage."""
    text = re.sub(r"\\\n", " ", dockerfile)
    result = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, argument = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            result.append([])
        if result:  # the global ARGs before the first FROM belong to no stage
            result[-1].append((instruction, argument.strip()))
    return result


def make_recipe(target):
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, f"no {target} target in the Makefile"
    return [line.strip() for line in match.group(1).splitlines()]


class ImageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        built = stages((ROOT / "docker" / "Dockerfile").read_text())
        cls.builder, cls.runtime = built[0], built[-1]
        cls.binary = built[-2]

    def values(self, stage, instruction):
        return [argument for name, argument in stage if name == instruction]

    def test_the_image_builds_with_make_release(self):
        self.assertEqual(self.values(self.builder, "RUN")[-1], "make release")
        self.assertEqual(make_recipe("release"), ["cargo build --release --locked --bin portico"])
        copied = self.values(self.runtime, "COPY")
        self.assertIn("--from=binary /src/target/release/portico /usr/local/bin/portico", copied)
        # By default the binary is the builder's (PORTICO_BINARY=prebuilt takes one built
        # outside the image, as the container test does).
        self.assertEqual(self.values(self.binary, "FROM"), ["${PORTICO_BINARY} AS binary"])
        dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
        self.assertIn("ARG PORTICO_BINARY=builder", dockerfile)

    def test_the_lockfile_satisfies_a_locked_build(self):
        result = subprocess.run(
            ["cargo", "metadata", "--locked", "--offline", "--format-version", "1", "--no-deps"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_the_runtime_is_non_root_with_ports_and_a_cache_volume(self):
        (user,) = self.values(self.runtime, "USER")
        self.assertNotIn(user.split(":")[0], {"root", "0"})
        exposed = " ".join(self.values(self.runtime, "EXPOSE")).split()
        self.assertEqual(sorted(exposed), ["8080", "9090"])
        self.assertIn('["/var/cache/portico"]', self.values(self.runtime, "VOLUME"))
        (entrypoint,) = self.values(self.runtime, "ENTRYPOINT")
        self.assertEqual(
            yaml.safe_load(entrypoint),
            ["/usr/local/bin/portico", "--config", "/etc/portico/portico.toml"],
        )

    def image_env(self):
        env = {}
        for argument in self.values(self.runtime, "ENV"):
            for pair in shlex.split(argument):
                name, _, value = pair.partition("=")
                env[name] = value
        return env

    def check_config(self, env):
        clean = {key: value for key, value in os.environ.items() if not key.startswith("PORTICO_")}
        return subprocess.run(
            [PORTICO, "check-config", "--config", str(ROOT / "config" / "portico.toml")],
            capture_output=True,
            text=True,
            env={**clean, **env},
        )

    def test_the_compose_stack_configures_a_valid_portico(self):
        compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
        portico = compose["services"]["portico"]
        self.assertEqual(portico["build"], {"context": "..", "dockerfile": "docker/Dockerfile"})
        self.assertEqual(sorted(portico["ports"]), ["8080:8080", "9090:9090"])
        self.assertIn("minio", portico["depends_on"])
        environment = {name: str(value) for name, value in portico["environment"].items()}
        self.assertEqual(environment["PORTICO_UPSTREAM_ENDPOINT"], "http://minio:9000")
        result = self.check_config({**self.image_env(), **environment})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('listen = "0.0.0.0:8080"', result.stdout)
        self.assertIn('endpoint = "http://minio:9000"', result.stdout)
        self.assertNotIn("demo-client-secret", result.stdout, "secrets are redacted")

    def test_the_dockerfile_s_own_example_configures_a_valid_portico(self):
        lines = [
            line.removeprefix("#").strip()
            for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines()
            if line.startswith("#")
        ]
        start = next(index for index, line in enumerate(lines) if line.startswith("docker run "))
        example = []
        for line in lines[start:]:
            example.append(line.removesuffix("\\").strip())
            if not line.endswith("\\"):
                break
        words = shlex.split(" ".join(example))
        flags = {
            name: value
            for flag, pair in zip(words, words[1:])
            if flag == "-e"
            for name, _, value in [pair.partition("=")]
        }
        self.assertIn("PORTICO_UPSTREAM_ENDPOINT", flags)
        result = self.check_config({**self.image_env(), **flags})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_make_run_installs_only_what_the_demo_needs(self):
        def dry_run(target, tools):
            result = subprocess.run(
                ["make", "-n", target, f"TOOLS_DIR={tools}", f"AWS_CLI={tools}/aws"],
                cwd=ROOT, capture_output=True, text=True,
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            return result.stdout

        with tempfile.TemporaryDirectory() as tools:
            run = dry_run("run", tools)
            self.assertIn("go install github.com/minio/minio@", run)
            self.assertIn("scripts/run-demo.sh", run)
            for unneeded in ["helm", "pip install", "apt-get", "kubernetes-validate"]:
                self.assertNotIn(unneeded, run)
            # The test tools come from apt with fresh package lists.
            aws = dry_run(f"{tools}/aws", tools)
            self.assertLess(aws.index("apt-get update"), aws.index("apt-get install"))

    def test_the_image_alone_refuses_to_start_without_a_client_credential(self):
        result = self.check_config(self.image_env())
        self.assertEqual(result.returncode, 2)
        self.assertIn("auth.mode", result.stderr)


if __name__ == "__main__":
    unittest.main()
