#!/usr/bin/env bash
# Install the real brokers used by the interop tests from Debian's packages:
# rabbitmq-server (3.10, with the bundled STOMP plugins) and activemq (Classic 5.17).
#
# Idempotent: packages already installed are skipped, and `apt-get update` runs only
# when apt does not know a package yet. Needs root (or password-less sudo) and apt.
# The packages' own services are never started: start.sh runs project-owned instances.
set -euo pipefail

PACKAGES=(rabbitmq-server activemq)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install.sh: ${PACKAGES[*]} already installed"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    echo "install.sh: apt-get is not available: install ${missing[*]} by hand (Debian/Ubuntu" \
        "packages) or point STOMPY_BROKER_URL at a broker of your own" >&2
    exit 2
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "install.sh: installing ${missing[*]} needs root (or password-less sudo)." \
            "Run: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
        exit 2
    fi
fi

# The packages' maintainer scripts would start their system-wide services (through
# invoke-rc.d): a policy-rc.d answering 101 forbids that. Put one in place only for
# the install, and only if the machine has none of its own.
POLICY=/usr/sbin/policy-rc.d
policy_added=0
cleanup() {
    if [ "$policy_added" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
trap cleanup EXIT
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\n# stompy ci/brokers/install.sh: no service starts during the install\nexit 101\n' |
        "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    policy_added=1
fi

export DEBIAN_FRONTEND=noninteractive
# "apt-get update once if needed": only when apt has no candidate for a package.
for pkg in "${missing[@]}"; do
    candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
        echo "install.sh: apt does not know $pkg yet: apt-get update"
        "${SUDO[@]}" apt-get update -q
        break
    fi
done

echo "install.sh: installing ${missing[*]}"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install.sh: done"
