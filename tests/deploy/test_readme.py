"""The README's configuration example, run exactly as written: it starts Portico (only the
listen addresses come from the environment, so the test never depends on ports 8080 and
9090 being free), which announces its listeners and stops cleanly on SIGTERM.

Run by `make test`: PORTICO_BIN names the portico binary; its directory goes first on PATH.
"""

import os
import pathlib
import re
import signal
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PORTICO = pathlib.Path(os.environ.get("PORTICO_BIN", str(ROOT / "target" / "debug" / "portico")))


def readme_example():
    """The sh block of the README that starts `portico --config config/portico.toml`."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    (example,) = [block for block in blocks if "portico --config config/portico.toml" in block]
    return example


class ReadmeTest(unittest.TestCase):
    def test_the_configuration_example_starts_portico(self):
        with tempfile.TemporaryDirectory() as home:
            clean = {key: value for key, value in os.environ.items() if not key.startswith("PORTICO_")}
            env = {
                **clean,
                "HOME": home,
                "PATH": f"{PORTICO.parent}:{os.environ['PATH']}",
                "PORTICO_SERVER_LISTEN": "127.0.0.1:0",
                "PORTICO_ADMIN_LISTEN": "127.0.0.1:0",
            }
            process = subprocess.Popen(
                ["bash", "-c", f"exec {readme_example()}"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                line = process.stdout.readline()
                self.assertTrue(line.startswith("portico listening s3=http://127.0.0.1:"), line + process.stderr.read() if not line else line)
                self.assertTrue((pathlib.Path(home) / ".cache" / "portico" / "portico-blocks").exists())
            finally:
                process.send_signal(signal.SIGTERM)
                _, stderr = process.communicate(timeout=60)
            self.assertEqual(process.returncode, 0, stderr)


if __name__ == "__main__":
    unittest.main()
