"""The VS Code extension in CI: install, typecheck and bundle, the Node test that drives `kerntune lsp`
through vscode-jsonrpc (VS Code's own parser: it catches stdout pollution), the .vsix package, and the packaged
extension's own server launch (its ServerOptions, started as vscode-languageclient starts them, --stdio
appended; the whole flow through it: tests/node/launch.test.mjs) (client-vscode/ci.sh). Skipped where Node.js
>= 20 and npm are not installed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _node_major() -> int:
    node = shutil.which("node")
    if not node:
        return 0
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    try:
        return int(out.lstrip("v").split(".")[0])
    except ValueError:
        return 0


@pytest.mark.timeout(600)
@pytest.mark.skipif(_node_major() < 20 or not shutil.which("npm"), reason="needs Node.js >= 20 and npm")
def test_extension_builds_tests_and_packages():
    env = {**os.environ, "KERNTUNE_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(["bash", str(REPO / "client-vscode" / "ci.sh")], capture_output=True, text=True, env=env,
                       timeout=580)
    assert p.returncode == 0, (p.stdout[-4000:], p.stderr[-4000:])
    assert list((REPO / "client-vscode").glob("kerntune-*.vsix"))
