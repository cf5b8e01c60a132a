"""The container image, built and run with podman against a real MinIO: the runtime stage of
docker/Dockerfile (a binary built outside the image, on a Debian 12 base made with
debootstrap, as no registry can be reached) runs as the chart's pod security context
says (its user, a read-only root file system, every capability dropped, no new
privileges) with its cache on a named volume. It answers /healthz, /readyz and /metrics
through published ports, serves signed GETs and PUTs byte-exact, keeps its disk tier
across a restart on the volume, trusts an upstream's private CA given as
`PORTICO_UPSTREAM_CA_FILE`, and on `podman stop` (SIGTERM) finishes the read in flight
and exits 0.

`make image-test` (part of `make test`) installs podman, runc and debootstrap and makes
the base once; PORTICO_PODMAN, PORTICO_IMAGE_BASE (the base's tar), PORTICO_MINIO and
PORTICO_BIN name what it uses.
"""

import hashlib
import os
import pathlib
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from test_chart import portico_container, pod_spec, render_demo, by_kind

ROOT = pathlib.Path(__file__).resolve().parents[2]
PODMAN = os.environ.get("PORTICO_PODMAN", "podman")
BASE_TAR = os.environ.get("PORTICO_IMAGE_BASE", "")
MINIO = os.environ.get("PORTICO_MINIO", "minio")
PORTICO = os.environ.get("PORTICO_BIN", str(ROOT / "target" / "debug" / "portico"))
BASE_IMAGE = "localhost/portico-image-test-base:bookworm"
IMAGE = "localhost/portico:image-test"
# From inside a container on slirp4netns, the host's loopback.
HOST = "10.0.2.2"
SLIRP = "slirp4netns:allow_host_loopback=true"
CLIENT = ("image-client", "image-client-secret")
MINIO_USER = ("minio-image", "minio-image-secret")
MIB = 1024 * 1024


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what, check, timeout=30.0):
    """Polls `check` until it returns a true value, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None, ""


class Podman:
    """podman with this machine's settings: runc, and ulimits within the hard limits."""

    def __init__(self, directory):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        conf = pathlib.Path(directory) / "containers.conf"
        conf.write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={hard}:{hard}", "nproc=4096:4096"]\n'
            '[engine]\nruntime = "runc"\n'
        )
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf))

    def __call__(self, *args, check=True, timeout=300):
        result = subprocess.run(
            [PODMAN, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {result.stderr}")
        return result.stdout.strip()


class Minio:
    """A MinIO on a free loopback port, over TLS when `certs` names a directory."""

    def __init__(self, directory, certs=None):
        self.port = free_port()
        pathlib.Path(directory).mkdir(parents=True, exist_ok=True)
        args = [MINIO, "server", str(pathlib.Path(directory) / "data")]
        args += ["--address", f"127.0.0.1:{self.port}", "--console-address", f"127.0.0.1:{free_port()}"]
        if certs:
            args += ["--certs-dir", str(certs)]
        env = dict(os.environ, MINIO_ROOT_USER=MINIO_USER[0], MINIO_ROOT_PASSWORD=MINIO_USER[1])
        self.log = open(pathlib.Path(directory) / "minio.log", "w")
        self.process = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        scheme = "https" if certs else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        verify = str(pathlib.Path(certs) / "CAs" / "ca.pem") if certs else None
        self.client = s3_client(self.url, MINIO_USER, verify)
        wait_for("MinIO ready", self.ready)

    def ready(self):
        try:
            self.client.list_buckets()
            return True
        except Exception:  # noqa: BLE001 (not up yet)
            return False

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def s3_client(url, credential, verify=None):
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=credential[0],
        aws_secret_access_key=credential[1],
        region_name="us-east-1",
        verify=verify,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def make_ca(directory):
    """A CA and a server certificate for the host as containers see it: (certs dir, CA)."""
    certs = pathlib.Path(directory) / "certs"
    (certs / "CAs").mkdir(parents=True)
    ca_key, ca = certs / "ca.key", certs / "CAs" / "ca.pem"
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", "/CN=portico image test CA")
    key, request = certs / "private.key", certs / "server.csr"
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(request), "-subj", "/CN=minio")
    extensions = certs / "san.ext"
    extensions.write_text(f"subjectAltName=IP:{HOST},IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(certs / "public.crt"), "-days", "2",
        "-extfile", str(extensions))
    return certs, ca


def chart_security():
    """The portico container's security context and the pod's, as the chart renders them."""
    (statefulset,) = by_kind(render_demo(), "StatefulSet")
    spec = pod_spec(statefulset)
    return portico_container(spec)["securityContext"], spec.get("securityContext", {})


class ContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="portico-image-")
        cls.podman = Podman(cls.work)
        if cls.podman("images", "-q", BASE_IMAGE, check=False) == "":
            assert BASE_TAR and os.path.exists(BASE_TAR), f"no base image tar: {BASE_TAR!r}"
            cls.podman("import", BASE_TAR, BASE_IMAGE)
        context = pathlib.Path(cls.work) / "context"
        (context / "target" / "release").mkdir(parents=True)
        (context / "config").mkdir()
        (context / "docker").mkdir()
        shutil.copy(ROOT / "docker" / "Dockerfile", context / "docker" / "Dockerfile")
        shutil.copy(ROOT / "config" / "portico.toml", context / "config" / "portico.toml")
        binary = context / "target" / "release" / "portico"
        subprocess.run(["objcopy", "--strip-debug", PORTICO, str(binary)], check=True)
        started = time.monotonic()
        cls.podman(
            "build", "-q", "-f", str(context / "docker" / "Dockerfile"),
            "--build-arg", f"BUILDER_IMAGE={BASE_IMAGE}",
            "--build-arg", f"RUNTIME_IMAGE={BASE_IMAGE}",
            "--build-arg", "PORTICO_BINARY=prebuilt",
            "-t", IMAGE, str(context),
        )
        built = time.monotonic() - started
        size = int(cls.podman("image", "inspect", "--format", "{{.Size}}", IMAGE))
        base = int(cls.podman("image", "inspect", "--format", "{{.Size}}", BASE_IMAGE))
        print(
            f"\nimage: built in {built:.1f} s, {size / MIB:.1f} MiB on a {base / MIB:.1f} MiB base "
            f"(adds {(size - base) / MIB:.1f} MiB: the binary, stripped of debug info, and the config)",
            file=sys.stderr,
        )
        cls.minio = Minio(pathlib.Path(cls.work) / "plain")
        cls.bucket = "image-test"
        cls.minio.client.create_bucket(Bucket=cls.bucket)
        cls.security, cls.pod_security = chart_security()

    @classmethod
    def tearDownClass(cls):
        cls.minio.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def run_flags(self):
        """podman flags for the chart's security context."""
        security = self.security
        flags = ["--user", f"{security['runAsUser']}:{security['runAsGroup']}"]
        if security.get("readOnlyRootFilesystem"):
            flags.append("--read-only")
        flags += [f"--cap-drop={capability}" for capability in security["capabilities"]["drop"]]
        if security.get("allowPrivilegeEscalation") is False:
            flags += ["--security-opt", "no-new-privileges"]
        if "fsGroup" in self.pod_security:
            flags += ["--group-add", str(self.pod_security["fsGroup"])]
        return flags

    def start(self, name, volume, upstream, extra=(), network=SLIRP):
        """Starts the image; (S3 URL, admin URL, seconds from start to ready)."""
        s3_port, admin_port = free_port(), free_port()
        self.podman("rm", "-f", name, check=False)
        args = ["run", "-d", "--name", name, *self.run_flags()]
        args += ["-v", f"{volume}:/var/cache/portico"]
        args += ["--network", network]
        args += ["-p", f"127.0.0.1:{s3_port}:8080", "-p", f"127.0.0.1:{admin_port}:9090"]
        env = {
            "PORTICO_UPSTREAM_ENDPOINT": upstream,
            "PORTICO_UPSTREAM_FORCE_PATH_STYLE": "true",
            "PORTICO_UPSTREAM_ACCESS_KEY_ID": MINIO_USER[0],
            "PORTICO_UPSTREAM_SECRET_ACCESS_KEY": MINIO_USER[1],
            "PORTICO_AUTH_ACCESS_KEY_ID": CLIENT[0],
            "PORTICO_AUTH_SECRET_ACCESS_KEY": CLIENT[1],
            "PORTICO_CACHE_MEMORY_CAPACITY": "64MiB",
            "PORTICO_CACHE_DISK_CAPACITY": "256MiB",
        }
        for name_value in env.items():
            args += ["-e", "=".join(name_value)]
        args += [*extra, IMAGE]
        started = time.monotonic()
        self.podman(*args)
        self.addCleanup(self.podman, "rm", "-f", name, check=False)
        admin = f"http://127.0.0.1:{admin_port}"

        def ready():
            state = self.podman("inspect", "--format", "{{.State.Status}}", name, check=False)
            if state in ("exited", "stopped"):
                raise AssertionError(f"{name} exited: {self.podman('logs', name, check=False)}")
            return http_status(f"{admin}/readyz")[0] == 200

        wait_for(f"{name} ready", ready)
        return f"http://127.0.0.1:{s3_port}", admin, time.monotonic() - started

    def volume(self, name):
        self.podman("volume", "rm", "-f", name, check=False)
        self.podman("volume", "create", name)
        self.addCleanup(self.podman, "volume", "rm", "-f", name, check=False)
        return name

    def metric(self, admin, sample):
        _, text = http_status(f"{admin}/metrics")
        for line in text.splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return 0.0

    def test_the_chart_s_security_context_is_what_the_image_runs_with(self):
        flags = self.run_flags()
        self.assertNotIn(str(self.security["runAsUser"]), ("0", "root"))
        self.assertIn("--read-only", flags)
        self.assertIn("--cap-drop=ALL", flags)
        self.assertIn("no-new-privileges", flags)

    def test_reads_and_writes_signed_requests_and_keeps_its_disk_tier_on_the_volume(self):
        data = os.urandom(6 * MIB + 123)
        self.minio.client.put_object(Bucket=self.bucket, Key="object.bin", Body=data)
        volume = self.volume("portico-image-test-cache")
        upstream = f"http://{HOST}:{self.minio.port}"
        s3, admin, took = self.start("portico-image-test", volume, upstream)
        print(f"\nimage: start to ready {took * 1000:.0f} ms (empty cache volume)", file=sys.stderr)
        self.assertEqual(http_status(f"{admin}/healthz")[0], 200)
        status, metrics = http_status(f"{admin}/metrics")
        self.assertEqual(status, 200)
        self.assertIn("portico_cache_block_lookups_total", metrics)
        user = self.podman("image", "inspect", "--format", "{{.Config.User}}", IMAGE)
        self.assertEqual(
            user,
            f"{self.security['runAsUser']}:{self.security['runAsGroup']}",
            "the image's user is the chart's",
        )

        client = s3_client(s3, CLIENT)
        body = client.get_object(Bucket=self.bucket, Key="object.bin")["Body"].read()
        self.assertEqual(hashlib.sha256(body).digest(), hashlib.sha256(data).digest())
        written = os.urandom(MIB + 7)
        client.put_object(Bucket=self.bucket, Key="written.bin", Body=written)
        direct = self.minio.client.get_object(Bucket=self.bucket, Key="written.bin")["Body"].read()
        self.assertEqual(direct, written, "the PUT through the image reached the origin")
        unsigned = http_status(f"{s3}/{self.bucket}/object.bin")[0]
        self.assertEqual(unsigned, 403, "an unsigned GET is refused")

        # A second start on the same volume serves the object from its disk tier.
        self.podman("stop", "-t", "30", "portico-image-test")
        exit_code = self.podman("inspect", "--format", "{{.State.ExitCode}}", "portico-image-test")
        self.assertEqual(exit_code, "0")
        s3, admin, _ = self.start("portico-image-test", volume, upstream)
        body = s3_client(s3, CLIENT).get_object(Bucket=self.bucket, Key="object.bin")["Body"].read()
        self.assertEqual(body, data)
        disk = self.metric(admin, 'portico_cache_block_lookups_total{result="disk_hit"}')
        misses = self.metric(admin, 'portico_cache_block_lookups_total{result="miss"}')
        self.assertEqual(misses, 0.0, "no block fetched again after the restart")
        self.assertGreater(disk, 0.0, "blocks read from the disk tier kept on the volume")

    def test_stop_finishes_the_read_in_flight_and_exits_0(self):
        data = os.urandom(48 * MIB)
        self.minio.client.put_object(Bucket=self.bucket, Key="slow.bin", Body=data)
        volume = self.volume("portico-image-test-drain")
        upstream = f"http://{HOST}:{self.minio.port}"
        name = "portico-image-test-drain"
        s3, _, _ = self.start(name, volume, upstream)
        body = s3_client(s3, CLIENT).get_object(Bucket=self.bucket, Key="slow.bin")["Body"].read()
        self.assertEqual(body, data)
        self.podman("stop", "-t", "30", name)
        # Served from the volume on podman's bridge network, as a pod is reached: the
        # client's TCP ends at the container's socket, and what Portico's socket still
        # holds when the container's network goes is lost (slirp4netns, which reaches the
        # origin, acknowledges bytes for the client itself). The origin is out of reach
        # from there: the cached object is served all the same.
        s3, _, _ = self.start(name, volume, "http://127.0.0.1:9", network="bridge")
        out = pathlib.Path(self.work) / "slow.bin"
        # A reader at 8 MiB/s: about 6 s for the object, under the 25 s grace.
        reader = subprocess.Popen(
            ["curl", "-sS", "--fail", "--limit-rate", "8M", "-o", str(out),
             "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{CLIENT[0]}:{CLIENT[1]}",
             f"{s3}/{self.bucket}/slow.bin"],
            stderr=subprocess.PIPE,
        )
        wait_for("the read under way", lambda: out.exists() and out.stat().st_size > MIB)
        self.assertIsNone(reader.poll(), "the read is still under way when the stop begins")
        stopping = threading.Thread(target=self.podman, args=("stop", "-t", "30", name))
        stopping.start()
        _, errors = reader.communicate(timeout=60)
        stopping.join(timeout=60)
        self.assertEqual(reader.returncode, 0, errors)
        self.assertEqual(hashlib.sha256(out.read_bytes()).digest(), hashlib.sha256(data).digest())
        exit_code = self.podman("inspect", "--format", "{{.State.ExitCode}}", name)
        self.assertEqual(exit_code, "0")

    def test_an_upstream_with_a_private_ca_given_as_ca_file(self):
        directory = pathlib.Path(self.work) / "tls"
        directory.mkdir()
        certs, ca = make_ca(directory)
        minio = Minio(directory, certs=certs)
        self.addCleanup(minio.stop)
        minio.client.create_bucket(Bucket="image-tls")
        data = os.urandom(MIB + 5)
        minio.client.put_object(Bucket="image-tls", Key="tls.bin", Body=data)
        volume = self.volume("portico-image-test-tls")
        upstream = f"https://{HOST}:{minio.port}"
        mount = ["-v", f"{ca}:/etc/portico/upstream-ca.pem:ro"]
        with_ca = [*mount, "-e", "PORTICO_UPSTREAM_CA_FILE=/etc/portico/upstream-ca.pem"]
        s3, _, _ = self.start("portico-image-test-tls", volume, upstream, with_ca)
        body = s3_client(s3, CLIENT).get_object(Bucket="image-tls", Key="tls.bin")["Body"].read()
        self.assertEqual(body, data)

        # Without the CA the origin is not trusted: /readyz says so (an unreachable origin
        # leaves Portico ready to serve what it cached), and the read fails.
        volume = self.volume("portico-image-test-untrusted")
        s3, admin, _ = self.start("portico-image-test-tls", volume, upstream)
        _, readiness = http_status(f"{admin}/readyz")
        self.assertIn("upstream: unreachable", readiness)
        client = s3_client(s3, CLIENT)
        with self.assertRaises(ClientError) as failed:
            client.get_object(Bucket="image-tls", Key="tls.bin")
        answer = failed.exception.response
        self.assertEqual(answer["ResponseMetadata"]["HTTPStatusCode"], 503)
        self.assertEqual(answer["Error"]["Code"], "ServiceUnavailable")


if __name__ == "__main__":
    unittest.main()
