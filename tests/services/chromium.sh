#!/usr/bin/env bash
# Debian's headless-capable Chromium for the browser tests of the HTML report.
#
#   tests/services/chromium.sh    # prints the path of the chromium binary
#
# Installs Debian's `chromium` package with apt-get when no chromium is on PATH (CI runs on a
# fresh Debian machine as root). Exits non-zero with one line on stderr when it cannot.
set -euo pipefail

die() { echo "chromium.sh: $*" >&2; exit 1; }

find_chromium() { command -v chromium || command -v chromium-browser || true; }

install_chromium() {
    [ "$(id -u)" = 0 ] || die "chromium is not installed and we are not root to apt-get install it"
    command -v apt-get >/dev/null || die "chromium is not installed and apt-get is missing"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; } >&2 \
        || die "apt-get install chromium failed"
}

bin=$(find_chromium)
if [ -z "$bin" ]; then install_chromium; bin=$(find_chromium); fi
[ -n "$bin" ] && [ -x "$bin" ] || die "no chromium on PATH after install"
echo "$bin"
