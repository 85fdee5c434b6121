#!/usr/bin/env bash
# Stop the processes that up.sh started, and only those: each PID comes from
# $KUBEBED_DIR/<name>.pid and is signalled only if /proc/<pid>/cmdline still
# names the expected binary (guards against PID reuse).  Never kills by name.
#
#   down.sh                   stop kube-controller-manager, kube-apiserver, etcd, fake-webhook (keep state)
#   down.sh kube-apiserver    stop only the named component(s) (e.g. to restart with other flags)
#   down.sh --purge           stop everything and delete $KUBEBED_DIR (certs, etcd data, logs)
set -uo pipefail

KUBE_PREFIX=${KUBE_PREFIX:-${BERTH_CACHE:-$HOME/.cache/berth}/kube-1.20.2}
D=${KUBEBED_DIR:-${BERTH_TESTBED:-/tmp/berth-testbed}/kubernetes}
log() { echo "[down.sh] $*" >&2; }

stop_one() { # name expected-binary
  local name=$1 bin=$2 pf=$D/$1.pid pid
  [[ -s $pf ]] || return 0
  pid=$(cat "$pf")
  if [[ ! -d /proc/$pid ]]; then log "$name (pid $pid) not running"; rm -f "$pf"; return 0; fi
  if ! tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q -- "$bin"; then
    log "pid $pid is no longer $name; leaving it alone"; rm -f "$pf"; return 0
  fi
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
  if [[ -d /proc/$pid ]]; then log "$name (pid $pid) ignored SIGTERM for 10s; SIGKILL"; kill -KILL "$pid" 2>/dev/null; fi
  log "stopped $name (pid $pid)"
  rm -f "$pf"
}

purge=0; only=()
for a in "$@"; do case $a in --purge) purge=1;; *) only+=("$a");; esac; done
((purge)) && only=()   # purging implies stopping everything
want() { ((${#only[@]} == 0)) && return 0; local o; for o in "${only[@]}"; do [[ $o == "$1" ]] && return 0; done; return 1; }

want kube-controller-manager && stop_one kube-controller-manager "$KUBE_PREFIX/bin/kube-controller-manager"
want kube-apiserver && stop_one kube-apiserver "$KUBE_PREFIX/bin/kube-apiserver"
want etcd && stop_one etcd /usr/bin/etcd
want fake-webhook && stop_one fake-webhook fake-webhook.py

if ((purge)); then
  case $D in /tmp/*|/dev/shm/*) rm -rf "$D"; log "removed $D";; *) log "refusing to purge $D (not under /tmp or /dev/shm)";; esac
  [[ -n ${KUBEBED_ETCD_DATA:-} && ${KUBEBED_ETCD_DATA} == /dev/shm/* ]] && rm -rf "$KUBEBED_ETCD_DATA"
fi
exit 0
