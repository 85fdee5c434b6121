#!/usr/bin/env bash
# Install the Debian packages the testbed needs, and only those missing.
#   Kubernetes build and run: golang-1.19-go, etcd-server, etcd-client, patch, openssl
#   OpenStack: mariadb-server, rabbitmq-server, gcc + Python headers (uwsgi builds from source), curl
# Debian's init scripts are kept from starting system-wide MariaDB/RabbitMQ daemons: the
# testbed runs its own copies on its own state directories and loopback ports.
set -euo pipefail
log() { printf '[deps %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

want=(golang-1.19-go etcd-server etcd-client patch openssl mariadb-server rabbitmq-server curl gcc)
# The services need Python >= 3.11 with venv and headers (Debian 12's python3 is 3.11).
if ! python3 -c 'import sys, venv, sysconfig, os; assert sys.version_info >= (3, 11); assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
    want+=(python3 python3-dev python3-venv)
fi
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    log "all Debian packages present"
    exit 0
fi
log "apt-get install ${missing[*]}"
own_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
fi
trap '[ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
log "installed ${missing[*]}"
