#!/usr/bin/env bash
# CI for the VS Code extension: install, typecheck + bundle, Node tests (the server driven through
# vscode-jsonrpc), the .vsix package, and the packaged extension's own server launch (its ServerOptions from the
# unpacked .vsix, started as vscode-languageclient starts them, --stdio included: tests/node/launch.test.mjs).
# Needs node >= 20 and the kerntune Python environment (KERNTUNE_PYTHON, default: python3; its bin/ must hold
# the `kerntune` console script for the default launch).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run build
npm test
npx vsce package --no-dependencies
ls -l ./*.vsix
rm -rf .packaged && mkdir .packaged
"${KERNTUNE_PYTHON:-python3}" -m zipfile -e ./kerntune-*.vsix .packaged
KERNTUNE_EXTENSION_DIR="$PWD/.packaged/extension" node --test ../tests/node/launch.test.mjs
