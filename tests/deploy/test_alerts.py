"""The alerting rules in charts/portico/alerts/portico.rules.yaml: `promtool check rules`
accepts them, `promtool test rules` runs their unit tests (alerts-test.yaml), and the
chart renders them as a PrometheusRule when asked.

Run by `make test`: PORTICO_PROMTOOL names promtool (from Debian's prometheus package,
unpacked by the Makefile), PORTICO_HELM names helm.
"""

import os
import pathlib
import subprocess
import unittest

import yaml

from test_chart import CHART, by_kind, render

HERE = pathlib.Path(__file__).resolve().parent
RULES = CHART / "alerts" / "portico.rules.yaml"
PROMTOOL = os.environ.get("PORTICO_PROMTOOL", "promtool")


def promtool(*args):
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=HERE)
    if result.returncode != 0:
        raise AssertionError(f"promtool {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


class AlertsTest(unittest.TestCase):
    def test_the_rules_are_valid(self):
        self.assertIn("SUCCESS: 9 rules found", promtool("check", "rules", str(RULES)))

    def test_the_main_alerts_fire_when_they_should_and_only_then(self):
        self.assertIn("SUCCESS", promtool("test", "rules", "alerts-test.yaml"))

    def test_the_chart_renders_the_same_rules_as_a_prometheus_rule(self):
        values = HERE / "values" / "standalone-minio.yaml"
        (rule,) = by_kind(render(CHART, values), "PrometheusRule")
        self.assertEqual(rule["spec"], yaml.safe_load(RULES.read_text()))
        self.assertEqual(rule["metadata"]["labels"]["release"], "prometheus")
        defaults = HERE / "values" / "standalone-defaults.yaml"
        self.assertEqual(by_kind(render(CHART, defaults), "PrometheusRule"), [])


if __name__ == "__main__":
    unittest.main()
