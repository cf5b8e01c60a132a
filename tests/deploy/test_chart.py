"""The Helm chart: it lints, renders in both modes with several value sets, every rendered
manifest validates against the Kubernetes schemas, the portico.toml it renders passes
`portico check-config` with the environment the pod would have, and bad values are
rejected by values.schema.json at install time.

Run by `make test` (helm, kubernetes-validate and the portico binary come from the
Makefile): PORTICO_HELM and PORTICO_BIN name the binaries.
"""

import json
import os
import pathlib
import re
import subprocess
import tempfile
import tomllib
import unittest

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "portico"
HERE = pathlib.Path(__file__).resolve().parent
HELM = os.environ.get("PORTICO_HELM", "helm")
PORTICO = os.environ.get("PORTICO_BIN", str(ROOT / "target" / "debug" / "portico"))
KUBERNETES_VERSION = "1.30.0"
# Custom resources have no schema in the Kubernetes set; their fields are checked here.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}


def helm(*args, check=True):
    result = subprocess.run([HELM, *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(chart, values=None, release="demo"):
    args = ["template", release, str(chart)]
    if values:
        args += ["-f", str(values)]
    documents = yaml.safe_load_all(helm(*args).stdout)
    return [document for document in documents if document]


def render_demo(*sets):
    """The demo release of the chart with the standalone MinIO values and `--set` each of `sets`."""
    args = ["template", "demo", str(CHART), "-f", str(HERE / "values" / "standalone-minio.yaml")]
    for value in sets:
        args += ["--set", value]
    return [document for document in yaml.safe_load_all(helm(*args).stdout) if document]


def portico_config(manifests):
    """The `portico.toml` the manifests' ConfigMap holds, parsed."""
    (config_map,) = [
        config for config in by_kind(manifests, "ConfigMap") if "portico.toml" in config["data"]
    ]
    return tomllib.loads(config_map["data"]["portico.toml"])


def by_kind(manifests, kind):
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def pod_spec(manifest):
    return manifest["spec"]["template"]["spec"]


def portico_container(spec):
    containers = spec.get("containers", []) + spec.get("initContainers", [])
    return next(container for container in containers if container["name"] == "portico")


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        helm("dependency", "build", str(HERE / "sidecar-app"))

    def value_sets(self):
        for values in sorted((HERE / "values").glob("*.yaml")):
            yield values.stem, CHART, values
        yield "sidecar-app", HERE / "sidecar-app", None

    def test_the_chart_lints_with_every_value_set(self):
        for name, chart, values in self.value_sets():
            with self.subTest(name):
                args = ["lint", "--strict", str(chart)]
                if values:
                    args += ["-f", str(values)]
                helm(*args)

    def test_rendered_manifests_match_the_kubernetes_schemas(self):
        for name, chart, values in self.value_sets():
            manifests = render(chart, values)
            self.assertTrue(manifests, name)
            for manifest in manifests:
                kind = manifest["kind"]
                with self.subTest(f"{name}: {kind} {manifest['metadata']['name']}"):
                    if kind == "ServiceMonitor":
                        self.check_service_monitor(manifest)
                        continue
                    if kind in CUSTOM_KINDS:
                        self.assertEqual(manifest["apiVersion"], "monitoring.coreos.com/v1")
                        self.assertTrue(manifest["spec"]["groups"])
                        continue
                    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)

    def check_service_monitor(self, monitor):
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        endpoint = monitor["spec"]["endpoints"][0]
        self.assertEqual((endpoint["port"], endpoint["path"]), ("admin", "/metrics"))
        self.assertTrue(monitor["spec"]["selector"]["matchLabels"])

    def test_standalone_runs_a_statefulset_with_probes_service_and_sized_resources(self):
        manifests = render(CHART, HERE / "values" / "standalone-defaults.yaml")
        (statefulset,) = by_kind(manifests, "StatefulSet")
        (service,) = [
            service for service in by_kind(manifests, "Service") if service["metadata"]["name"] == "demo-portico"
        ]
        container = portico_container(pod_spec(statefulset))
        self.assertEqual(container["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(container["readinessProbe"]["httpGet"]["path"], "/readyz")
        # memory_capacity 1GiB: requests 1 GiB + 256 MiB + the index of the 10 GiB disk
        # tier (2 MiB); the limit adds the in-flight budget (max_inflight_bytes 512MiB).
        self.assertEqual(container["resources"]["requests"]["memory"], "1282Mi")
        self.assertEqual(container["resources"]["limits"]["memory"], "1794Mi")
        self.assertEqual(
            {port["name"]: port["port"] for port in service["spec"]["ports"]},
            {"s3": 8080, "admin": 9090},
        )
        # The admin API listens on the pod's loopback only, apart from probes and metrics.
        (config_map,) = [
            config for config in by_kind(manifests, "ConfigMap") if "portico.toml" in config["data"]
        ]
        admin = tomllib.loads(config_map["data"]["portico.toml"])["admin"]
        self.assertEqual((admin["listen"], admin["api_listen"]), ("0.0.0.0:9090", "127.0.0.1:9091"))
        (claim,) = statefulset["spec"]["volumeClaimTemplates"]
        self.assertEqual(claim["metadata"]["name"], "portico-cache")
        for kind in ["Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret"]:
            self.assertFalse(by_kind(manifests, kind), f"{kind} is off by default")

    def test_consistent_hash_routing_hashes_on_bucket_and_key(self):
        manifests = render(CHART, HERE / "values" / "standalone-minio.yaml")
        (ingress,) = by_kind(manifests, "Ingress")
        annotations = ingress["metadata"]["annotations"]
        self.assertEqual(annotations["nginx.ingress.kubernetes.io/upstream-hash-by"], "$host$uri")
        (statefulset,) = by_kind(manifests, "StatefulSet")
        self.assertEqual(statefulset["spec"]["replicas"], 3)
        (dashboard,) = [
            config for config in by_kind(manifests, "ConfigMap") if "portico.json" in config["data"]
        ]
        self.assertEqual(json.loads(dashboard["data"]["portico.json"])["title"], "Portico")

    def test_secrets_reach_the_pod_as_environment_never_the_configmap(self):
        manifests = render(CHART, HERE / "values" / "standalone-minio.yaml")
        (config_map,) = [
            config for config in by_kind(manifests, "ConfigMap") if "portico.toml" in config["data"]
        ]
        toml = config_map["data"]["portico.toml"]
        for secret in ["minio-reader-secret", "analytics-secret", "admin-token", "events-token"]:
            self.assertNotIn(secret, toml)
        (statefulset,) = by_kind(manifests, "StatefulSet")
        env = {item["name"]: item for item in portico_container(pod_spec(statefulset))["env"]}
        for name in [
            "PORTICO_UPSTREAM_SECRET_ACCESS_KEY",
            "PORTICO_AUTH_SECRET_ACCESS_KEY",
            "PORTICO_ADMIN_TOKEN",
            "PORTICO_EVENTS_TOKEN",
            "PORTICO_UPSTREAMS_LAB_ACCESS_KEY_ID",
            "PORTICO_UPSTREAMS_REPLICA_SECRET_ACCESS_KEY",
        ]:
            self.assertIn("secretKeyRef", env[name]["valueFrom"], name)
        self.assertEqual(
            env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"],
            "http://otel-collector.observability.svc:4318",
        )

    def test_irsa_uses_the_aws_chain_and_existing_secrets(self):
        manifests = render(CHART, HERE / "values" / "standalone-irsa.yaml")
        (account,) = by_kind(manifests, "ServiceAccount")
        self.assertIn("eks.amazonaws.com/role-arn", account["metadata"]["annotations"])
        self.assertFalse(by_kind(manifests, "Secret"), "no inline secret to render")
        (statefulset,) = by_kind(manifests, "StatefulSet")
        spec = pod_spec(statefulset)
        self.assertEqual(spec["serviceAccountName"], account["metadata"]["name"])
        container = portico_container(spec)
        names = [item["name"] for item in container["env"]]
        self.assertNotIn("PORTICO_UPSTREAM_ACCESS_KEY_ID", names)
        self.assertEqual(
            container["env"][names.index("PORTICO_ADMIN_TOKEN")]["valueFrom"]["secretKeyRef"],
            {"name": "portico-admin", "key": "token"},
        )
        # Autoscaled replicas form a cluster, its secret from the existing Secret too.
        self.assertEqual(
            container["env"][names.index("PORTICO_CLUSTER_SECRET")]["valueFrom"]["secretKeyRef"],
            {"name": "portico-cluster", "key": "secret"},
        )
        self.assertEqual(container["resources"]["limits"]["memory"], "2Gi")
        self.assertNotIn("volumeClaimTemplates", statefulset["spec"])
        self.assertTrue(by_kind(manifests, "HorizontalPodAutoscaler"))

    def test_sidecar_mode_renders_only_the_shared_pieces(self):
        kinds = sorted(manifest["kind"] for manifest in render(CHART, HERE / "values" / "sidecar.yaml"))
        self.assertEqual(kinds, ["ConfigMap", "ServiceAccount"])

    def test_the_sidecar_template_adds_a_native_sidecar_to_a_job(self):
        manifests = render(HERE / "sidecar-app")
        (job,) = by_kind(manifests, "Job")
        spec = pod_spec(job)
        sidecar = portico_container(spec)
        self.assertIn(sidecar, spec["initContainers"])
        self.assertEqual(sidecar["restartPolicy"], "Always")
        volumes = {volume["name"] for volume in spec["volumes"]}
        self.assertEqual(volumes, {"portico-config", "portico-cache"})
        config_maps = {config["metadata"]["name"] for config in by_kind(manifests, "ConfigMap")}
        config_volume = next(v for v in spec["volumes"] if v["name"] == "portico-config")
        self.assertIn(config_volume["configMap"]["name"], config_maps)

    def test_several_replicas_form_a_cluster_behind_a_headless_service(self):
        manifests = render(CHART, HERE / "values" / "standalone-minio.yaml")
        services = {service["metadata"]["name"]: service for service in by_kind(manifests, "Service")}
        peers = services["demo-portico-peers"]
        self.assertEqual(peers["spec"]["clusterIP"], "None")
        self.assertIs(peers["spec"]["publishNotReadyAddresses"], False)
        self.assertEqual([port["port"] for port in peers["spec"]["ports"]], [9100])
        self.assertEqual(services["demo-portico"]["spec"]["type"], "ClusterIP")
        self.assertNotIn(9100, [port["port"] for port in services["demo-portico"]["spec"]["ports"]])
        (statefulset,) = by_kind(manifests, "StatefulSet")
        self.assertEqual(statefulset["spec"]["serviceName"], "demo-portico-peers")
        container = portico_container(pod_spec(statefulset))
        self.assertIn({"name": "peer", "containerPort": 9100, "protocol": "TCP"}, container["ports"])
        env = {item["name"]: item for item in container["env"]}
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        self.assertEqual(env["PORTICO_CLUSTER_ADVERTISE"]["value"], "$(POD_IP):9100")
        # Each pod's zone from its topology label, unless the release names one.
        self.assertEqual(
            env["PORTICO_CLUSTER_ZONE"]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['topology.kubernetes.io/zone']",
        )
        values = HERE / "values" / "standalone-minio.yaml"
        rendered = helm("template", "demo", str(CHART), "-f", str(values), "--set", "cluster.zoneFromPodLabel=false")
        fixed = [document for document in yaml.safe_load_all(rendered.stdout) if document]
        (fixed_statefulset,) = by_kind(fixed, "StatefulSet")
        fixed_env = [item["name"] for item in portico_container(pod_spec(fixed_statefulset))["env"]]
        self.assertNotIn("PORTICO_CLUSTER_ZONE", fixed_env)
        self.assertEqual(
            env["PORTICO_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"],
            {"name": "demo-portico-secrets", "key": "cluster_secret"},
        )
        (secret,) = by_kind(manifests, "Secret")
        self.assertGreaterEqual(len(secret["stringData"]["cluster_secret"]), 16)
        (config_map,) = [
            config for config in by_kind(manifests, "ConfigMap") if "portico.toml" in config["data"]
        ]
        toml = config_map["data"]["portico.toml"]
        self.assertNotIn(secret["stringData"]["cluster_secret"], toml)
        cluster = tomllib.loads(toml)["cluster"]
        self.assertEqual(
            cluster,
            {
                "enabled": True,
                "listen": "0.0.0.0:9100",
                "members_dns": "demo-portico-peers.default.svc.cluster.local:9100",
            },
        )

    def test_a_members_file_from_the_values_is_the_membership_and_the_service_is_not_added(self):
        # The schema accepts the key (helm checks it while it renders).
        manifests = render_demo("config.cluster.members_file=/etc/portico/members/members.txt")
        cluster = portico_config(manifests)["cluster"]
        self.assertEqual(cluster["members_file"], "/etc/portico/members/members.txt")
        self.assertNotIn("members_dns", cluster)

    def test_mutual_tls_between_pods_mounts_the_secret_and_names_the_members(self):
        values = HERE / "values" / "standalone-minio.yaml"
        manifests = render_demo("cluster.tls.secretName=portico-peer-tls")
        cluster = portico_config(manifests)["cluster"]
        self.assertEqual(cluster["tls_cert"], "/etc/portico/cluster-tls/tls.crt")
        self.assertEqual(cluster["tls_key"], "/etc/portico/cluster-tls/tls.key")
        self.assertEqual(cluster["tls_ca"], "/etc/portico/cluster-tls/ca.crt")
        self.assertEqual(cluster["tls_server_name"], "demo-portico-peers.default.svc")
        (statefulset,) = by_kind(manifests, "StatefulSet")
        spec = pod_spec(statefulset)
        volume = next(v for v in spec["volumes"] if v["name"] == "portico-cluster-tls")
        self.assertEqual(volume["secret"]["secretName"], "portico-peer-tls")
        mounts = {m["name"]: m for m in portico_container(spec)["volumeMounts"]}
        self.assertEqual(mounts["portico-cluster-tls"]["mountPath"], "/etc/portico/cluster-tls")
        self.assertTrue(mounts["portico-cluster-tls"]["readOnly"])

        named = helm(
            "template", "demo", str(CHART), "-f", str(values),
            "--set", "cluster.tls.secretName=portico-peer-tls",
            "--set", "cluster.tls.serverName=peers.cache.example",
        )
        toml = next(
            document["data"]["portico.toml"]
            for document in yaml.safe_load_all(named.stdout)
            if document and document["kind"] == "ConfigMap" and "portico.toml" in document["data"]
        )
        self.assertEqual(tomllib.loads(toml)["cluster"]["tls_server_name"], "peers.cache.example")
        # Without a Secret, plain HTTP: nothing is mounted.
        manifests = render(CHART, values)
        (statefulset,) = by_kind(manifests, "StatefulSet")
        self.assertNotIn("portico-cluster-tls", [v["name"] for v in pod_spec(statefulset)["volumes"]])

    def test_one_replica_runs_alone_and_sidecars_join_their_workloads_ring(self):
        manifests = render(CHART, HERE / "values" / "standalone-defaults.yaml")
        (config_map,) = by_kind(manifests, "ConfigMap")
        self.assertNotIn("cluster", tomllib.loads(config_map["data"]["portico.toml"]))
        (statefulset,) = by_kind(manifests, "StatefulSet")
        ports = [port["name"] for port in portico_container(pod_spec(statefulset))["ports"]]
        self.assertEqual(ports, ["s3", "admin"])

        manifests = render(HERE / "sidecar-app")
        (config_map,) = [
            config for config in by_kind(manifests, "ConfigMap") if "portico.toml" in config["data"]
        ]
        cluster = tomllib.loads(config_map["data"]["portico.toml"])["cluster"]
        self.assertEqual(cluster["members_dns"], "trainer-peers:9100")
        (job,) = by_kind(manifests, "Job")
        env = {item["name"]: item for item in portico_container(pod_spec(job))["env"]}
        self.assertEqual(env["PORTICO_CLUSTER_ADVERTISE"]["value"], "$(POD_IP):9100")
        (secret,) = by_kind(manifests, "Secret")
        self.assertEqual(secret["stringData"]["cluster_secret"], "a-secret-the-sidecars-share")

    def test_every_rendered_config_passes_check_config(self):
        for name, chart, values in self.value_sets():
            with self.subTest(name):
                manifests = render(chart, values)
                (config_map,) = [
                    config
                    for config in by_kind(manifests, "ConfigMap")
                    if "portico.toml" in config.get("data", {})
                ]
                workloads = by_kind(manifests, "StatefulSet") + by_kind(manifests, "Job")
                env = {}
                if workloads:
                    container = portico_container(pod_spec(workloads[0]))
                    for item in container.get("env", []):
                        # A Secret's value as the pod would see it (any non-empty string).
                        env[item["name"]] = item.get("value", f"from-secret-{item['name'].lower()}")
                if values and "credentialsFileSecret" in values.read_text():
                    env["PORTICO_AUTH_CREDENTIALS_FILE"] = str(HERE / "credentials.toml")
                if name == "sidecar":
                    env["PORTICO_UPSTREAM_ACCESS_KEY_ID"] = "from-secret"
                    env["PORTICO_UPSTREAM_SECRET_ACCESS_KEY"] = "from-secret"
                self.check_config(config_map["data"]["portico.toml"], env)

    def check_config(self, toml, env):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as file:
            file.write(toml)
            file.flush()
            clean = {key: value for key, value in os.environ.items() if not key.startswith("PORTICO_")}
            result = subprocess.run(
                [PORTICO, "check-config", "--config", file.name],
                capture_output=True,
                text=True,
                env={**clean, **env},
            )
        self.assertEqual(result.returncode, 0, f"{result.stderr}\n--- portico.toml:\n{toml}")
        self.assertIn("configuration is valid", result.stderr)
        # The effective configuration echoes the chart's values, secrets redacted.
        self.assertNotIn("from-secret-portico_auth_secret_access_key", result.stdout)
        for line in toml.splitlines():
            match = re.fullmatch(r'(\w+) = "([^"]*)"', line.strip())
            if match and match.group(1) == "listen":
                self.assertIn(line.strip(), result.stdout)

    def test_bad_values_are_rejected_at_install(self):
        cases = sorted((HERE / "bad-values").glob("*.yaml"))
        self.assertGreaterEqual(len(cases), 10)
        for values in cases:
            expected = values.read_text().splitlines()[0].removeprefix("# expect: ")
            with self.subTest(values.stem):
                result = helm("template", "bad", str(CHART), "-f", str(values), check=False)
                self.assertNotEqual(result.returncode, 0, f"{values.stem} was accepted")
                self.assertIn(expected, result.stderr)

    def test_the_schema_knows_every_configuration_key_and_no_other(self):
        with tempfile.TemporaryDirectory() as directory:
            config = pathlib.Path(directory) / "portico.toml"
            config.write_text('[auth]\nmode = "none"\n')
            result = subprocess.run(
                [PORTICO, "check-config", "--config", str(config)], capture_output=True, text=True
            )
        self.assertEqual(result.returncode, 0, result.stderr)
        defaults = tomllib.loads(result.stdout)
        sections = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]["properties"]
        self.assertEqual(sorted(sections), sorted(defaults))
        for name, keys in defaults.items():
            with self.subTest(name):
                if isinstance(keys, list):
                    # An array of tables ([[rules]]): empty by default.
                    self.assertEqual(sections[name]["type"], "array")
                    self.assertIs(sections[name]["items"]["additionalProperties"], False)
                    continue
                self.assertIs(sections[name]["additionalProperties"], False)
                self.assertEqual(sorted(sections[name]["properties"]), sorted(keys))

    def test_the_schema_knows_every_rule_key(self):
        rule = {
            "name": "every-key",
            "bucket": "ml-*",
            "prefix": "datasets/",
            "metadata_ttl": "immutable",
            "negative_ttl": "0s",
            "prefetch": False,
        }
        with tempfile.TemporaryDirectory() as directory:
            config = pathlib.Path(directory) / "portico.toml"
            # JSON strings and booleans are TOML values too.
            lines = [f"{key} = {json.dumps(value)}" for key, value in rule.items()]
            config.write_text('[auth]\nmode = "none"\n\n[[rules]]\n' + "\n".join(lines) + "\n")
            result = subprocess.run(
                [PORTICO, "check-config", "--config", str(config)], capture_output=True, text=True
            )
        self.assertEqual(result.returncode, 0, result.stderr)
        (effective,) = tomllib.loads(result.stdout)["rules"]
        # Unset keys are not printed: cache is the one the rule above leaves out.
        self.assertNotIn("cache", effective)
        effective["cache"] = True
        schema = json.loads((CHART / "values.schema.json").read_text())
        keys = schema["properties"]["config"]["properties"]["rules"]["items"]["properties"]
        self.assertEqual(sorted(keys), sorted(effective))

    def test_the_dashboard_only_charts_metrics_portico_exports(self):
        dashboard = json.loads((CHART / "dashboards" / "portico.json").read_text())
        self.assertEqual(dashboard["title"], "Portico")
        exported = set()
        for source in (ROOT / "src" / "telemetry" / "metrics").glob("*.rs"):
            exported.update(re.findall(r'"(portico_[a-z_]+)"', source.read_text()))
        self.assertTrue(exported)
        charted = set()
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                charted.update(re.findall(r"\b(portico_[a-z_]+)", target["expr"]))
        self.assertGreaterEqual(len(charted), 8)
        suffixes = ("_total", "_bucket", "_sum", "_count")
        for metric in sorted(charted):
            base = metric
            for suffix in suffixes:
                base = base.removesuffix(suffix)
            self.assertIn(base, exported, f"the dashboard charts {metric}, which Portico does not export")


if __name__ == "__main__":
    unittest.main()
