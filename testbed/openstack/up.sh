#!/usr/bin/env bash
# Bring up a small but real OpenStack on 127.0.0.1, from PyPI packages.
#
#   up.sh [--fresh] [SERVICE...]
#
# SERVICE is any of: keystone neutron octavia nova cinder (default: all).
# Dependencies are added: octavia and nova need neutron; nova brings
# placement and glance; everything needs keystone.
#   --fresh   stop our processes and wipe the state (not the venv) first.
#
# Environment: OSBED (state dir, default /tmp/osbed), OSBED_VENV,
# OSBED_PYTHON (python3), OSBED_PASSWORD (secret), OSBED_AZ (zone-a).
# Idempotent: re-running reuses the venv, the databases and anything
# already running.  Stop with down.sh.  Credentials: $OSBED/adminrc,
# $OSBED/demorc, $OSBED/clouds.yaml (clouds osbed-admin, osbed-demo).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

FRESH=0
want=()
for a in "$@"; do
    case $a in
        --fresh) FRESH=1 ;;
        keystone|neutron|octavia|nova|cinder) want+=("$a") ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) die "unknown argument $a" ;;
    esac
done
[ ${#want[@]} -gt 0 ] || want=(${OSBED_SERVICES:-keystone neutron octavia nova cinder})
declare -A W=([keystone]=1)
for s in "${want[@]}"; do W[$s]=1; done
[ -n "${W[octavia]:-}" ] && W[neutron]=1
[ -n "${W[nova]:-}" ] && W[neutron]=1
NEED_DB=0; NEED_MQ=0
[ -n "${W[neutron]:-}${W[cinder]:-}" ] && NEED_DB=1
[ -n "${W[octavia]:-}${W[nova]:-}${W[cinder]:-}" ] && NEED_MQ=1
SERVICES=$(for s in keystone neutron octavia nova cinder; do if [ -n "${W[$s]:-}" ]; then printf '%s ' "$s"; fi; done)
log "services: $SERVICES(mariadb=$NEED_DB rabbitmq=$NEED_MQ)"

if [ $FRESH = 1 ] && [ -d "$OSBED" ]; then
    "$OSBED_TOOLS/down.sh" --purge || die "could not clear $OSBED"
fi
T0=$(date +%s)
mkdir -p "$OSBED"/{etc,log,run,data,src}
touch "$OSBED/.osbed-state-dir"

# ---------------------------------------------------------------- packages
apt_pkgs=()
[ $NEED_DB = 1 ] && ! command -v mariadbd > /dev/null && apt_pkgs+=(mariadb-server)
[ $NEED_MQ = 1 ] && ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] && apt_pkgs+=(rabbitmq-server)
command -v openssl > /dev/null || apt_pkgs+=(openssl)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
    log "apt-get install ${apt_pkgs[*]}"
    # keep the packages' init scripts from starting system-wide daemons:
    # we run our own copies on our own state dirs.
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        own_policy=1
    fi
    apt-get update -qq > "$OSBED/log/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${apt_pkgs[@]}" >> "$OSBED/log/apt.log" 2>&1 || { tail -20 "$OSBED/log/apt.log"; die "apt-get failed"; }
    [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# --------------------------------------------------------------- python venv
REQ_HASH=$(cat "$OSBED_TOOLS/constraints.txt" | sha256sum | cut -c1-16)
if [ ! -f "$VENV/.osbed-$REQ_HASH" ]; then
    log "creating venv $VENV (pip install, a few minutes)"
    [ -x "$VENV/bin/python" ] || "$OSBED_PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q -U pip setuptools wheel > "$OSBED/log/pip.log" 2>&1
    "$VENV/bin/pip" install -c "$OSBED_TOOLS/constraints.txt" \
        keystone neutron octavia nova openstack-placement glance cinder \
        python-openstackclient python-octaviaclient keystonemiddleware \
        openstacksdk uwsgi PyMySQL >> "$OSBED/log/pip.log" 2>&1 \
        || { tail -30 "$OSBED/log/pip.log"; die "pip install failed"; }
    touch "$VENV/.osbed-$REQ_HASH"
fi
EXT_HASH=$(cd "$OSBED_TOOLS/osbed_ext" && cat pyproject.toml osbed_ext/*.py | sha256sum | cut -c1-16)
if [ ! -f "$VENV/.osbed-ext-$EXT_HASH" ]; then
    rm -rf "$OSBED/src/osbed_ext"
    cp -r "$OSBED_TOOLS/osbed_ext" "$OSBED/src/osbed_ext"
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation "$OSBED/src/osbed_ext" \
        >> "$OSBED/log/pip.log" 2>&1 || die "osbed_ext install failed"
    rm -f "$VENV"/.osbed-ext-*
    touch "$VENV/.osbed-ext-$EXT_HASH"
fi
T_VENV=$(date +%s)
OS="$VENV/bin/openstack"
PY="$VENV/bin/python"

# ------------------------------------------------------------------ MariaDB
sql() { mariadb --defaults-file="$OSBED/etc/my.cnf" -uroot -N -B -e "$1" 2>/dev/null || echo 0; }
if [ $NEED_DB = 1 ]; then
    render my.cnf "$OSBED/etc/my.cnf"
    if [ ! -d "$OSBED/mysql/mysql" ]; then
        log "initialising MariaDB datadir"
        mkdir -p "$OSBED/mysql"
        mariadb-install-db --defaults-file="$OSBED/etc/my.cnf" \
            --auth-root-authentication-method=socket --skip-test-db \
            > "$OSBED/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
    fi
    port_free mariadb 3306
    start_bg mariadb /usr/sbin/mariadbd --defaults-file="$OSBED/etc/my.cnf"
    wait_port 3306 60
    for i in $(seq 60); do
        mariadb --defaults-file="$OSBED/etc/my.cnf" -uroot -e 'select 1' > /dev/null 2>&1 && break
        sleep 0.5
    done
    mariadb --defaults-file="$OSBED/etc/my.cnf" -uroot -e "
        CREATE USER IF NOT EXISTS 'osbed'@'127.0.0.1' IDENTIFIED BY '$PASSWORD';
        GRANT ALL ON *.* TO 'osbed'@'127.0.0.1';
        CREATE DATABASE IF NOT EXISTS neutron; CREATE DATABASE IF NOT EXISTS octavia;
        CREATE DATABASE IF NOT EXISTS nova_api; CREATE DATABASE IF NOT EXISTS nova_cell0;
        CREATE DATABASE IF NOT EXISTS nova_cell1; CREATE DATABASE IF NOT EXISTS placement;
        CREATE DATABASE IF NOT EXISTS glance; CREATE DATABASE IF NOT EXISTS cinder;
        CREATE DATABASE IF NOT EXISTS keystone;"
fi

# ----------------------------------------------------------------- RabbitMQ
if [ $NEED_MQ = 1 ]; then
    render rabbitmq.conf "$OSBED/etc/rabbitmq.conf"
    mkdir -p "$OSBED/rabbitmq/mnesia" "$OSBED/rabbitmq/log"
    # our own epmd, loopback only, in the foreground so we own its pid
    port_free epmd 4369
    port_free rabbitmq 5672 25672
    start_bg epmd /usr/bin/epmd -address 127.0.0.1 -port 4369
    wait_port 4369 20
    start_bg rabbitmq env HOME="$OSBED/rabbitmq" ERL_EPMD_ADDRESS=127.0.0.1 \
        RABBITMQ_NODENAME=osbed@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
        RABBITMQ_NODE_PORT=5672 RABBITMQ_DIST_PORT=25672 \
        RABBITMQ_CONFIG_FILE="$OSBED/etc/rabbitmq.conf" \
        RABBITMQ_MNESIA_BASE="$OSBED/rabbitmq/mnesia" \
        RABBITMQ_LOG_BASE="$OSBED/rabbitmq/log" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$OSBED/rabbitmq/enabled_plugins" \
        RABBITMQ_PID_FILE="$OSBED/rabbitmq/rabbit.pid" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        /usr/lib/rabbitmq/bin/rabbitmq-server
fi

# ----------------------------------------------------------------- Keystone
# Keystone on MariaDB when it runs: on sqlite, concurrent password logins (each writes
# user.last_active_at) fail with "database is locked" and Keystone answers 500.
if [ $NEED_DB = 1 ]; then
    KEYSTONE_DB="$DB_URL_BASE/keystone?charset=utf8mb4"
else
    KEYSTONE_DB="sqlite:///$OSBED/data/keystone.db"
fi
render keystone.conf "$OSBED/etc/keystone.conf" "KEYSTONE_DB=$KEYSTONE_DB"
if [ ! -f "$OSBED/data/.init-keystone-db$NEED_DB" ]; then
    log "keystone: db_sync, fernet, bootstrap"
    KM="$VENV/bin/keystone-manage --config-file $OSBED/etc/keystone.conf"
    {
        $KM db_sync
        $KM fernet_setup --keystone-user root --keystone-group root
        $KM credential_setup --keystone-user root --keystone-group root
        $KM bootstrap --bootstrap-password "$PASSWORD" \
            --bootstrap-username admin --bootstrap-project-name admin \
            --bootstrap-role-name admin --bootstrap-service-name keystone \
            --bootstrap-region-id RegionOne \
            --bootstrap-admin-url http://127.0.0.1:5000/v3/ \
            --bootstrap-internal-url http://127.0.0.1:5000/v3/ \
            --bootstrap-public-url http://127.0.0.1:5000/v3/
    } > "$OSBED/log/keystone-init.out" 2>&1 || { tail -20 "$OSBED/log/keystone-init.out"; die "keystone init failed"; }
    touch "$OSBED/data/.init-keystone-db$NEED_DB"
fi
uwsgi_start keystone 5000 keystone.wsgi.api:application \
    --env "OS_KEYSTONE_CONFIG_FILES=$OSBED/etc/keystone.conf"

# --------------------------------------------- DB migrations (in parallel
# with keystone's start; they only need MariaDB)
migrate() { # name cmd...
    local name=$1; shift
    [ -f "$OSBED/data/.init-$name" ] && return 0
    if "$@" > "$OSBED/log/$name-db.out" 2>&1; then
        touch "$OSBED/data/.init-$name"
    else
        tail -20 "$OSBED/log/$name-db.out" >&2
        return 1
    fi
}
pids=()
if [ -n "${W[neutron]:-}" ]; then
    render neutron.conf "$OSBED/etc/neutron/neutron.conf"
    render ml2_conf.ini "$OSBED/etc/neutron/ml2_conf.ini"
    mkdir -p "$OSBED/data/neutron/lock"
    migrate neutron "$VENV/bin/neutron-db-manage" --config-file "$OSBED/etc/neutron/neutron.conf" \
        --config-file "$OSBED/etc/neutron/ml2_conf.ini" upgrade heads & pids+=($!)
fi
if [ -n "${W[octavia]:-}" ]; then
    render octavia.conf "$OSBED/etc/octavia/octavia-api.conf" LOGNAME=octavia-api \
        OCTAVIA_NETWORK_DRIVER=allowed_address_pairs_driver
    render octavia.conf "$OSBED/etc/octavia/octavia-worker.conf" LOGNAME=octavia-worker \
        OCTAVIA_NETWORK_DRIVER=osbed_vip_port_driver
    C="$OSBED/data/octavia-certs"
    mkdir -p "$C" "$OSBED/data/octavia-lock"
    if [ ! -f "$C/client.pem" ]; then
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$C/ca.key" -out "$C/ca.pem" \
            -days 3650 -subj /CN=osbed-octavia-ca > /dev/null 2>&1
        cat "$C/ca.pem" "$C/ca.key" > "$C/client.pem"
    fi
    migrate octavia "$VENV/bin/octavia-db-manage" --config-file "$OSBED/etc/octavia/octavia-api.conf" \
        upgrade head & pids+=($!)
fi
if [ -n "${W[nova]:-}" ]; then
    render placement.conf "$OSBED/etc/placement/placement.conf"
    render glance-api.conf "$OSBED/etc/glance/glance-api.conf"
    mkdir -p "$OSBED"/data/glance-{images,tasks,staging,cache,lock} "$OSBED"/data/nova/{instances,lock}
    for s in api conductor scheduler compute manage; do
        render nova.conf "$OSBED/etc/nova/nova-$s.conf" LOGNAME=nova-$s
    done
    cp "$VENV/etc/nova/api-paste.ini" "$OSBED/etc/nova/api-paste.ini"
    # nova-compute talks to the databases only through the conductor
    awk '/^\[(api_)?database\]/{skip=1; next} /^\[/{skip=0} !skip' \
        "$OSBED/etc/nova/nova-compute.conf" > "$OSBED/etc/nova/nova-compute.conf.tmp"
    mv "$OSBED/etc/nova/nova-compute.conf.tmp" "$OSBED/etc/nova/nova-compute.conf"
    migrate placement "$VENV/bin/placement-manage" --config-file "$OSBED/etc/placement/placement.conf" \
        db sync & pids+=($!)
    migrate glance "$VENV/bin/glance-manage" --config-file "$OSBED/etc/glance/glance-api.conf" \
        db_sync & pids+=($!)
    NM="$VENV/bin/nova-manage --config-file $OSBED/etc/nova/nova-manage.conf"
    migrate nova bash -c "set -e; $NM api_db sync
        $NM cell_v2 map_cell0 --database_connection '$DB_URL_BASE/nova_cell0?charset=utf8mb4'
        $NM cell_v2 list_cells | grep -q ' cell1 ' || $NM cell_v2 create_cell --name cell1 \
            --database_connection '$DB_URL_BASE/nova_cell1?charset=utf8mb4' --transport-url '$RABBIT_URL'
        $NM db sync" & pids+=($!)
fi
if [ -n "${W[cinder]:-}" ]; then
    mkdir -p "$OSBED"/data/cinder/{lock,coordination}
    for s in api scheduler volume manage; do
        render cinder.conf "$OSBED/etc/cinder/cinder-$s.conf" LOGNAME=cinder-$s
    done
    migrate cinder "$VENV/bin/cinder-manage" --config-file "$OSBED/etc/cinder/cinder-manage.conf" \
        db sync & pids+=($!)
fi

wait_http http://127.0.0.1:5000/v3 90
admin_env
log "keystone: users, projects, catalog"
"$PY" "$OSBED_TOOLS/osbed_setup.py" keystone $SERVICES 2> "$OSBED/log/setup-keystone.out" \
    || { cat "$OSBED/log/setup-keystone.out"; die "keystone setup failed"; }

for p in "${pids[@]}"; do wait "$p" || die "a database migration failed (see $OSBED/log/*-db.out)"; done
T_DB=$(date +%s)

# ------------------------------------------------------------ start services
if [ -n "${W[neutron]:-}" ]; then
    uwsgi_start neutron-api 9696 neutron.wsgi.api:application \
        --env "OS_NEUTRON_CONFIG_DIR=$OSBED/etc/neutron" \
        --env "OS_NEUTRON_CONFIG_FILES=neutron.conf;ml2_conf.ini"
fi
if [ -n "${W[nova]:-}" ]; then
    uwsgi_start placement-api 8778 placement.wsgi.api:application \
        --env "OS_PLACEMENT_CONFIG_DIR=$OSBED/etc/placement"
    uwsgi_start glance-api 9292 glance.wsgi.api:application \
        --http-chunked-input --http-raw-body \
        --env "OS_GLANCE_CONFIG_DIR=$OSBED/etc/glance"
    uwsgi_start nova-api 8774 nova.wsgi.osapi_compute:application \
        --env "OS_NOVA_CONFIG_DIR=$OSBED/etc/nova" \
        --env "OS_NOVA_CONFIG_FILES=api-paste.ini;nova-api.conf"
    for s in conductor scheduler; do
        start_bg nova-$s "$VENV/bin/nova-$s" --config-file "$OSBED/etc/nova/nova-$s.conf"
    done
fi
if [ -n "${W[cinder]:-}" ]; then
    uwsgi_start cinder-api 8776 cinder.wsgi.api:application \
        --pyargv "--config-file $OSBED/etc/cinder/cinder-api.conf"
fi
if [ $NEED_MQ = 1 ]; then
    wait_port 5672 90
fi
if [ -n "${W[octavia]:-}" ]; then
    uwsgi_start octavia-api 9876 octavia.wsgi.api:application \
        --pyargv "--config-file $OSBED/etc/octavia/octavia-api.conf"
    start_bg octavia-worker "$VENV/bin/octavia-worker" \
        --config-file "$OSBED/etc/octavia/octavia-worker.conf"
fi
if [ -n "${W[cinder]:-}" ]; then
    for s in scheduler volume; do
        start_bg cinder-$s "$VENV/bin/cinder-$s" --config-file "$OSBED/etc/cinder/cinder-$s.conf"
    done
fi

if [ -n "${W[neutron]:-}" ]; then
    wait_http http://127.0.0.1:9696/ 120
    "$PY" "$OSBED_TOOLS/osbed_setup.py" neutron 2> "$OSBED/log/setup-neutron.out" \
        || { cat "$OSBED/log/setup-neutron.out"; die "neutron setup failed"; }
    "$PY" "$OSBED_TOOLS/osbed_setup.py" tenant "$OSBED/tenant.json" 2> "$OSBED/log/setup-tenant.out" \
        || { cat "$OSBED/log/setup-tenant.out"; die "tenant network setup failed"; }
fi
if [ -n "${W[nova]:-}" ]; then
    wait_http http://127.0.0.1:8778/ 120
    # compute last: it registers its resource provider in placement
    start_bg nova-compute "$VENV/bin/nova-compute" --config-file "$OSBED/etc/nova/nova-compute.conf"
    wait_http http://127.0.0.1:9292/ 120
    wait_http http://127.0.0.1:8774/ 120
    log "waiting for nova-compute to register (scheduler discovers hosts every 5s)"
    ok=0
    for i in $(seq 120); do
        if [ "$(sql "SELECT COUNT(*) FROM nova_api.host_mappings WHERE host='osbed-compute-1'")" = 1 ]; then ok=1; break; fi
        sleep 1
    done
    [ $ok = 1 ] || die "nova-compute did not register (see $OSBED/log/nova-compute.log)"
    [ -f "$OSBED/data/tiny.img" ] || head -c 1048576 /dev/zero > "$OSBED/data/tiny.img"
    "$PY" "$OSBED_TOOLS/osbed_setup.py" nova "$OSBED/data/tiny.img" 2> "$OSBED/log/setup-nova.out" \
        || { cat "$OSBED/log/setup-nova.out"; die "nova setup failed"; }
fi
if [ -n "${W[octavia]:-}" ]; then
    wait_http http://127.0.0.1:9876/ 120
fi
if [ -n "${W[cinder]:-}" ]; then
    wait_http http://127.0.0.1:8776/ 120
    log "waiting for cinder-volume to report"
    ok=0
    for i in $(seq 90); do
        if [ "$(sql "SELECT COUNT(*) FROM cinder.services WHERE topic='cinder-volume' AND deleted=0 AND updated_at > UTC_TIMESTAMP() - INTERVAL 30 SECOND")" -ge 1 ]; then ok=1; break; fi
        sleep 1
    done
    [ $ok = 1 ] || die "cinder-volume is not up (see $OSBED/log/cinder-volume.log)"
fi
# ------------------------------------------------------------- credentials
for who in admin demo; do
    cat > "$OSBED/${who}rc" <<EOF
export OS_AUTH_URL=http://127.0.0.1:5000/v3
export OS_IDENTITY_API_VERSION=3
export OS_USERNAME=$who
export OS_PASSWORD=$PASSWORD
export OS_PROJECT_NAME=$who
export OS_USER_DOMAIN_NAME=Default
export OS_PROJECT_DOMAIN_NAME=Default
export OS_REGION_NAME=RegionOne
export OS_INTERFACE=public
export PATH=$VENV/bin:\$PATH
EOF
done
cat > "$OSBED/clouds.yaml" <<EOF
clouds:
$(for who in admin demo; do cat <<EOC
  osbed-$who:
    auth:
      auth_url: http://127.0.0.1:5000/v3
      username: $who
      password: $PASSWORD
      project_name: $who
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
    identity_api_version: 3
EOC
done)
EOF
T1=$(date +%s)
echo "$SERVICES" > "$OSBED/run/services"
log "up in $((T1 - T0))s (venv $((T_VENV - T0))s, db $((T_DB - T_VENV))s): $SERVICES"
log "credentials: . $OSBED/adminrc  (or demorc); OS_CLIENT_CONFIG_FILE=$OSBED/clouds.yaml"
