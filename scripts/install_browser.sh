#!/usr/bin/env bash
# Install Debian's Chromium for the chat page's browser tests (tests/integration/test_chat_page.py),
# driven by Playwright from PyPI (the dev extra). Playwright's own browser download is not used:
# it cannot be reached from these machines. Safe to run again: does nothing when it is there.
set -euo pipefail
chromium="${CRAG_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] && exit 0
if ! command -v apt-get >/dev/null; then
    echo "install_browser: $chromium is missing and there is no apt-get: install Chromium and set CRAG_CHROMIUM" >&2
    exit 1
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y -q chromium >/dev/null 2>&1 || {
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q chromium >/dev/null
}
"$chromium" --version
