#!/usr/bin/env bash
# CI for the VS Code extension: install, typecheck + bundle, Node tests (the server driven through
# vscode-jsonrpc), and the .vsix package. Needs node >= 20 and the kerntune Python environment
# (KERNTUNE_PYTHON, default: python3) for the server the Node test starts.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run build
npm test
npx vsce package --no-dependencies
ls -l ./*.vsix
