# shellcheck shell=bash
# Shared settings and helpers for up.sh / down.sh / smoke.sh.
# Everything runs on 127.0.0.1; all state lives under $OSBED.

# berth: state under $BERTH_TESTBED/openstack, the venv in the cache outside the clone
BERTH_TESTBED=${BERTH_TESTBED:-/tmp/berth-testbed}
BERTH_CACHE=${BERTH_CACHE:-$HOME/.cache/berth}
OSBED=${OSBED:-$BERTH_TESTBED/openstack}
OSBED_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${OSBED_VENV:-$BERTH_CACHE/openstack-venv}
OSBED_PYTHON=${OSBED_PYTHON:-python3}
PASSWORD=${OSBED_PASSWORD:-secret}
# availability zone of the fake compute host and of cinder volumes
OSBED_AZ=${OSBED_AZ:-zone-a}
DB_URL_BASE="mysql+pymysql://osbed:${PASSWORD}@127.0.0.1:3306"
RABBIT_URL="rabbit://guest:guest@127.0.0.1:5672/"

export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}

log() { printf '[osbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# proc_start PID -> the process's start time (clock ticks since boot); with
# the pid it identifies a process for good (pids are recycled, and several
# services rewrite their command line, so neither alone will do).
proc_start() { awk '{sub(/^.*\) /, ""); print $20}' "/proc/$1/stat" 2>/dev/null; }

# pid_alive NAME -> 0 if $OSBED/run/NAME.pid names a live process that we
# started (same pid and same start time as recorded).
pid_alive() {
    local f="$OSBED/run/$1.pid" pid
    [ -f "$f" ] || return 1
    pid=$(cat "$f")
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    [ -f "$OSBED/run/$1.start" ] || return 0
    [ "$(proc_start "$pid")" = "$(cat "$OSBED/run/$1.start")" ]
}

# start_bg NAME CMD... : start CMD in its own session (pgid == pid), stdout
# and stderr to $OSBED/log/NAME.out, pid to $OSBED/run/NAME.pid.
start_bg() {
    local name=$1; shift
    if pid_alive "$name"; then
        log "$name already running (pid $(cat "$OSBED/run/$name.pid"))"
        return 0
    fi
    setsid nohup "$@" > "$OSBED/log/$name.out" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" > "$OSBED/run/$name.pid"
    # remember its start time to recognise the process later
    proc_start "$pid" > "$OSBED/run/$name.start"
    sleep 0.2
    log "started $name (pid $pid)"
}

# port_free NAME PORT... : die if a port is taken while NAME is not running
# (someone else's server there would answer our readiness checks)
port_free() {
    local name=$1 p; shift
    pid_alive "$name" && return 0
    for p in "$@"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "127.0.0.1:$p is already in use by a process up.sh did not start ($name needs it)"
        fi
    done
}

# uwsgi_start NAME PORT MODULE [uwsgi args...]
# OSBED_UWSGI_REQLOG=1 logs every request (not only 4xx/5xx) to
# $OSBED/log/NAME.out, one line each:
#   REQ <epoch ms at start> <method> <uri> <status> <ms taken> <user agent>
# (anchor-bench counts API calls from these lines).  Default: off.
# OSBED_UWSGI_PROCESSES=N runs N processes of each API (default 1: one Python GIL each).
# OSBED_UWSGI_THREADS=N threads per process (default 4).
uwsgi_start() {
    local name=$1 port=$2 module=$3; shift 3
    local logargs=(--disable-logging --log-5xx --log-4xx)
    if [ "${OSBED_UWSGI_REQLOG:-0}" = 1 ]; then
        logargs=(--log-format 'REQ %(tmsecs) %(method) %(uri) %(status) %(msecs) %(uagent)')
    fi
    port_free "$name" "$port"
    start_bg "$name" "$VENV/bin/uwsgi" \
        --http-socket "127.0.0.1:$port" --module "$module" \
        --processes "${OSBED_UWSGI_PROCESSES:-1}" --threads "${OSBED_UWSGI_THREADS:-4}" --enable-threads \
        --die-on-term --need-app --add-header 'Connection: close' \
        --buffer-size 65535 \
        --virtualenv "$VENV" --env PYTHONWARNINGS=ignore \
        "${logargs[@]}" \
        "$@"
}

# wait_http URL [SECONDS] : until URL answers any HTTP status
wait_http() {
    local url=$1 t=${2:-90} i code
    for ((i = 0; i < t * 2; i++)); do
        code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$url" || true)
        if [ -n "$code" ] && [ "$code" != 000 ]; then return 0; fi
        sleep 0.5
    done
    die "no answer from $url after ${t}s"
}

# wait_port PORT [SECONDS]
wait_port() {
    local port=$1 t=${2:-60} i
    for ((i = 0; i < t * 2; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.5
    done
    die "nothing listening on 127.0.0.1:$port after ${t}s"
}

# render TEMPLATE DEST [KEY=VALUE...] : replace @OSBED@ @VENV@ @PASSWORD@
# @AZ@ @DB@ and any extra @KEY@ given.
render() {
    local src=$1 dst=$2; shift 2
    local args=(-e "s#@OSBED@#$OSBED#g" -e "s#@VENV@#$VENV#g"
                -e "s#@PASSWORD@#$PASSWORD#g" -e "s#@AZ@#$OSBED_AZ#g"
                -e "s#@DB@#$DB_URL_BASE#g" -e "s#@RABBIT@#$RABBIT_URL#g")
    local kv
    for kv in "$@"; do
        args+=(-e "s#@${kv%%=*}@#${kv#*=}#g")
    done
    mkdir -p "$(dirname "$dst")"
    sed "${args[@]}" "$OSBED_TOOLS/templates/$src" > "$dst"
}

admin_env() {
    export OS_AUTH_URL=http://127.0.0.1:5000/v3 OS_IDENTITY_API_VERSION=3
    export OS_USERNAME=admin OS_PASSWORD=$PASSWORD OS_PROJECT_NAME=admin
    export OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default
    export OS_REGION_NAME=RegionOne OS_INTERFACE=public
    unset OS_CLOUD
}

# the order in which down.sh stops things (reverse of start)
ALL_PROCS="cinder-volume cinder-scheduler cinder-api nova-compute
nova-scheduler nova-conductor nova-api glance-api placement-api
octavia-worker octavia-api neutron-api keystone rabbitmq epmd mariadb"
