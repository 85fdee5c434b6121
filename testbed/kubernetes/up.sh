#!/usr/bin/env bash
# Start a real Kubernetes v1.20.2 control plane on loopback only:
#   etcd 3.4 (Debian etcd-server)  http://127.0.0.1:$KUBEBED_ETCD_PORT
#   kube-apiserver                 https://127.0.0.1:$KUBEBED_APISERVER_PORT
#   kube-controller-manager        (only if KUBEBED_KCM=1)
# No kubelet, no scheduler, no nodes: create "hollow" Node objects by hand.
# --endpoint-reconciler-type=none: the default (lease) reconciler would try to write
# 127.0.0.1 into Endpoints default/kubernetes, which validation rejects (loopback), and
# log an error every 10s.  Service default/kubernetes (10.96.0.1) still exists.
#
# Writes everything under $KUBEBED_DIR (default /tmp/kubebed):
#   pki/                 CA, apiserver serving cert, SA key pair, admin + KCM client certs
#   tokens.csv           static token file (admin token in admin.token, group system:masters)
#   admin.kubeconfig     bearer-token kubeconfig for the admin (use with kubectl / client libs)
#   admin-cert.kubeconfig  same identity via client certificate
#   kcm.kubeconfig       client-cert kubeconfig for kube-controller-manager
#   *.pid, logs/*.log    one PID file per process this script started (down.sh reads them)
#   env                  shell snippet: KUBECONFIG, KUBEBED_TOKEN, KUBEBED_SERVER, KUBEBED_CA
#
# Idempotent: if the recorded processes are alive and /readyz is ok, it just prints the env.
#
# Env knobs:
#   KUBEBED_DIR=/tmp/kubebed  KUBE_PREFIX=/opt/kube-1.20
#   KUBEBED_ETCD_PORT=12379 KUBEBED_ETCD_PEER_PORT=12380 KUBEBED_APISERVER_PORT=6443
#   KUBEBED_ETCD_DATA=<dir>          etcd data dir (default $KUBEBED_DIR/etcd; /dev/shm/... is faster)
#   KUBEBED_AUTHN_WEBHOOK=<kubeconfig>   -> --authentication-token-webhook-config-file
#   KUBEBED_AUTHZ_WEBHOOK=<kubeconfig>   -> appends Webhook to --authorization-mode and
#                                           --authorization-webhook-config-file
#   KUBEBED_WEBHOOK_VERSION=v1|v1beta1   TokenReview/SubjectAccessReview version sent to the
#                                        webhooks (apiserver 1.20's own default is v1beta1)
#   KUBEBED_APISERVER_ARGS="..."     extra kube-apiserver flags
#   KUBEBED_KCM=1                    also start kube-controller-manager
#   KUBEBED_KCM_CLOUD_PROVIDER=openstack|external|""   (default "": no cloud provider)
#   KUBEBED_KCM_CLOUD_CONFIG=<file>  --cloud-config for the KCM
#   KUBEBED_KCM_ARGS="..."           extra kube-controller-manager flags
#   KUBEBED_KCM_PORT=10257           KCM secure (healthz/metrics) port on 127.0.0.1
# Several independent beds can run side by side with distinct KUBEBED_DIR + ports.
#   KUBEBED_READY_TIMEOUT=120        seconds to wait for /readyz
set -euo pipefail

KUBE_PREFIX=${KUBE_PREFIX:-${BERTH_CACHE:-$HOME/.cache/berth}/kube-1.20.2}
BIN=$KUBE_PREFIX/bin
D=${KUBEBED_DIR:-${BERTH_TESTBED:-/tmp/berth-testbed}/kubernetes}
ETCD_PORT=${KUBEBED_ETCD_PORT:-12379}
ETCD_PEER_PORT=${KUBEBED_ETCD_PEER_PORT:-12380}
API_PORT=${KUBEBED_APISERVER_PORT:-6443}
ETCD_DATA=${KUBEBED_ETCD_DATA:-$D/etcd}
READY_TIMEOUT=${KUBEBED_READY_TIMEOUT:-120}
SERVER=https://127.0.0.1:$API_PORT
PKI=$D/pki
LOGS=$D/logs

log() { echo "[up.sh] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for b in kube-apiserver; do [[ -x $BIN/$b ]] || die "$BIN/$b missing; run build.sh first"; done
command -v etcd >/dev/null || die "etcd missing (apt-get install etcd-server)"
command -v openssl >/dev/null || die "openssl missing"

mkdir -p "$D" "$PKI" "$LOGS"
chmod 700 "$D"

# alive NAME BINARY: is the PID in $D/NAME.pid alive and running BINARY?
alive() {
  local pf=$D/$1.pid pid
  [[ -s $pf ]] || return 1
  pid=$(cat "$pf")
  [[ -d /proc/$pid ]] || return 1
  tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q -- "$2"
}

port_busy() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

# start NAME LOGFILE CMD...: start detached, record PID
start() {
  local name=$1 logf=$2; shift 2
  nohup "$@" >"$logf" 2>&1 </dev/null &
  echo $! >"$D/$name.pid"
  log "started $name pid $(cat "$D/$name.pid") (log $logf)"
}

readyz() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$D/admin.token")" \
    "$SERVER/readyz" 2>/dev/null
}

# ---------------------------------------------------------------- certificates
gen_pki() {
  [[ -s $PKI/ca.crt && -s $PKI/apiserver.crt && -s $PKI/sa.key && -s $PKI/admin.crt && -s $PKI/kcm.crt ]] && return 0
  log "generating PKI in $PKI"
  (
    cd "$PKI"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -sha256 -days 3650 -subj "/CN=kubebed-ca" -out ca.crt
    cat >apiserver.ext <<'EOF'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:::1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    cat >client.ext <<'EOF'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
    # serving cert
    openssl genrsa -out apiserver.key 2048 2>/dev/null
    openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # client certs: admin (system:masters), kube-controller-manager, apiserver->kubelet (unused but valid)
    mk_client() { # file CN O
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
        -extfile client.ext -out "$1.crt" 2>/dev/null
    }
    mk_client admin kubernetes-admin system:masters
    mk_client kcm system:kube-controller-manager ""
    mk_client apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    # service-account key pair
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr
    chmod 600 ./*.key
  )
}

# front-proxy (aggregation layer) CA: without --requestheader-client-ca-file every component
# that delegates authn (kube-controller-manager, aggregated APIs) logs "missing content for
# CA bundle ... requestheader-client-ca-file" several times a second.
gen_front_proxy() {
  [[ -s $PKI/front-proxy-ca.crt && -s $PKI/front-proxy-client.crt ]] && return 0
  (
    cd "$PKI"
    openssl genrsa -out front-proxy-ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key front-proxy-ca.key -sha256 -days 3650 -subj "/CN=kubebed-front-proxy-ca" -out front-proxy-ca.crt
    openssl genrsa -out front-proxy-client.key 2048 2>/dev/null
    openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" -out front-proxy-client.csr
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
      -sha256 -days 3650 -extfile client.ext -out front-proxy-client.crt 2>/dev/null
    rm -f front-proxy-client.csr; chmod 600 ./*.key
  )
}

gen_tokens() {
  [[ -s $D/admin.token && -s $D/tokens.csv ]] && return 0
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$D/admin.token"
  chmod 600 "$D/admin.token"
  # token,user,uid,"group1,group2"
  printf '%s,admin,admin-uid,"system:masters"\n' "$(cat "$D/admin.token")" >"$D/tokens.csv"
  chmod 600 "$D/tokens.csv"
}

write_kubeconfig() { # file user-stanza-yaml
  local f=$1 user=$2
  cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubebed
  cluster:
    server: $SERVER
    certificate-authority: $PKI/ca.crt
users:
- name: user
  user:
$user
contexts:
- name: kubebed
  context:
    cluster: kubebed
    user: user
current-context: kubebed
EOF
  chmod 600 "$f"
}

gen_pki
gen_front_proxy
gen_tokens
write_kubeconfig "$D/admin.kubeconfig" "    token: $(cat "$D/admin.token")"
write_kubeconfig "$D/admin-cert.kubeconfig" "    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key"
write_kubeconfig "$D/kcm.kubeconfig" "    client-certificate: $PKI/kcm.crt
    client-key: $PKI/kcm.key"
cat >"$D/env" <<EOF
export KUBECONFIG=$D/admin.kubeconfig
export KUBEBED_SERVER=$SERVER
export KUBEBED_CA=$PKI/ca.crt
export KUBEBED_TOKEN=$(cat "$D/admin.token")
EOF

# ---------------------------------------------------------------- etcd
if alive etcd /usr/bin/etcd; then
  log "etcd already running (pid $(cat "$D/etcd.pid"))"
else
  port_busy "$ETCD_PORT" && die "127.0.0.1:$ETCD_PORT busy but not ours (set KUBEBED_ETCD_PORT)"
  mkdir -p "$ETCD_DATA"; chmod 700 "$ETCD_DATA"
  start etcd "$LOGS/etcd.log" /usr/bin/etcd \
    --name kubebed \
    --data-dir "$ETCD_DATA" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kubebed=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --listen-metrics-urls "" \
    --logger zap --log-outputs stderr --log-level warn \
    --snapshot-count 10000 \
    --quota-backend-bytes $((2*1024*1024*1024))
  for _ in $(seq 1 100); do
    curl -fsS --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' && break
    alive etcd /usr/bin/etcd || { tail -20 "$LOGS/etcd.log" >&2; die "etcd exited"; }
    sleep 0.1
  done
fi

# ---------------------------------------------------------------- kube-apiserver
if alive kube-apiserver "$BIN/kube-apiserver" && readyz >/dev/null; then
  log "kube-apiserver already running and ready (pid $(cat "$D/kube-apiserver.pid"))"
else
  if ! alive kube-apiserver "$BIN/kube-apiserver"; then
    port_busy "$API_PORT" && die "127.0.0.1:$API_PORT busy but not ours (set KUBEBED_APISERVER_PORT)"
    authz=Node,RBAC
    extra=()
    if [[ -n ${KUBEBED_AUTHN_WEBHOOK:-} ]]; then
      extra+=(--authentication-token-webhook-config-file="$KUBEBED_AUTHN_WEBHOOK"
              --authentication-token-webhook-version="${KUBEBED_WEBHOOK_VERSION:-v1}"
              --authentication-token-webhook-cache-ttl=10s)
    fi
    if [[ -n ${KUBEBED_AUTHZ_WEBHOOK:-} ]]; then
      authz=Node,RBAC,Webhook
      extra+=(--authorization-webhook-config-file="$KUBEBED_AUTHZ_WEBHOOK"
              --authorization-webhook-version="${KUBEBED_WEBHOOK_VERSION:-v1}"
              --authorization-webhook-cache-authorized-ttl=10s
              --authorization-webhook-cache-unauthorized-ttl=10s)
    fi
    # shellcheck disable=SC2206
    extra+=(${KUBEBED_APISERVER_ARGS:-})
    date +%s.%N >"$D/kube-apiserver.started"
    start kube-apiserver "$LOGS/kube-apiserver.log" "$BIN/kube-apiserver" \
      --advertise-address=127.0.0.1 \
      --bind-address=127.0.0.1 \
      --secure-port="$API_PORT" \
      --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
      --client-ca-file="$PKI/ca.crt" \
      --tls-cert-file="$PKI/apiserver.crt" \
      --tls-private-key-file="$PKI/apiserver.key" \
      --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
      --requestheader-allowed-names=front-proxy-client \
      --requestheader-username-headers=X-Remote-User \
      --requestheader-group-headers=X-Remote-Group \
      --requestheader-extra-headers-prefix=X-Remote-Extra- \
      --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
      --proxy-client-key-file="$PKI/front-proxy-client.key" \
      --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
      --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
      --service-account-key-file="$PKI/sa.pub" \
      --service-account-signing-key-file="$PKI/sa.key" \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local \
      --api-audiences=https://kubernetes.default.svc.cluster.local \
      --authorization-mode="$authz" \
      --token-auth-file="$D/tokens.csv" \
      --service-cluster-ip-range=10.96.0.0/12 \
      --service-node-port-range=30000-32767 \
      --endpoint-reconciler-type=none \
      --enable-admission-plugins=NodeRestriction \
      --allow-privileged=true \
      --profiling=false \
      --v="${KUBEBED_APISERVER_V:-1}" \
      "${extra[@]}"
  fi
  log "waiting for $SERVER/readyz (timeout ${READY_TIMEOUT}s)"
  deadline=$(( $(date +%s) + READY_TIMEOUT ))
  until [[ $(readyz || true) == ok ]]; do
    alive kube-apiserver "$BIN/kube-apiserver" || { tail -30 "$LOGS/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
    (( $(date +%s) < deadline )) || { tail -30 "$LOGS/kube-apiserver.log" >&2; die "readyz timeout"; }
    sleep 0.2
  done
  if [[ -s $D/kube-apiserver.started ]]; then
    t0=$(cat "$D/kube-apiserver.started"); t1=$(date +%s.%N)
    log "kube-apiserver ready in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s"
    rm -f "$D/kube-apiserver.started"
  fi
fi

# ---------------------------------------------------------------- kube-controller-manager (optional)
if [[ ${KUBEBED_KCM:-0} == 1 ]]; then
  [[ -x $BIN/kube-controller-manager ]] || die "$BIN/kube-controller-manager missing; run build.sh"
  if alive kube-controller-manager "$BIN/kube-controller-manager"; then
    log "kube-controller-manager already running (pid $(cat "$D/kube-controller-manager.pid"))"
  else
    kextra=()
    if [[ -n ${KUBEBED_KCM_CLOUD_PROVIDER:-} ]]; then
      kextra+=(--cloud-provider="$KUBEBED_KCM_CLOUD_PROVIDER")
      [[ -n ${KUBEBED_KCM_CLOUD_CONFIG:-} ]] && kextra+=(--cloud-config="$KUBEBED_KCM_CLOUD_CONFIG")
    fi
    # shellcheck disable=SC2206
    kextra+=(${KUBEBED_KCM_ARGS:-})
    start kube-controller-manager "$LOGS/kube-controller-manager.log" "$BIN/kube-controller-manager" \
      --kubeconfig="$D/kcm.kubeconfig" \
      --authentication-kubeconfig="$D/kcm.kubeconfig" \
      --authorization-kubeconfig="$D/kcm.kubeconfig" \
      --bind-address=127.0.0.1 \
      --secure-port="${KUBEBED_KCM_PORT:-10257}" \
      --port=0 \
      --leader-elect=false \
      --use-service-account-credentials=true \
      --service-account-private-key-file="$PKI/sa.key" \
      --root-ca-file="$PKI/ca.crt" \
      --cluster-signing-cert-file="$PKI/ca.crt" \
      --cluster-signing-key-file="$PKI/ca.key" \
      --service-cluster-ip-range=10.96.0.0/12 \
      --cluster-name=kubebed \
      --controllers='*,bootstrapsigner,tokencleaner' \
      --v="${KUBEBED_KCM_V:-2}" \
      "${kextra[@]}"
  fi
fi

# The env file holds the admin token: point at it, never print it (CI logs are public).
log "ready: source $D/env   (KUBECONFIG=$D/admin.kubeconfig)"
