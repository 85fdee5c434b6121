#!/usr/bin/env bash
# Show the Kubernetes processes up.sh started (from their pid files), their memory, and /readyz.
set -uo pipefail
D=${KUBEBED_DIR:-${BERTH_TESTBED:-/tmp/berth-testbed}/kubernetes}
printf '%-24s %7s %9s\n' component pid rss_MiB
for n in etcd kube-apiserver kube-controller-manager; do
    pf=$D/$n.pid
    [ -s "$pf" ] || continue
    pid=$(cat "$pf")
    [ -r "/proc/$pid/status" ] || { printf '%-24s %7s %9s\n' "$n" "$pid" dead; continue; }
    rss=$(awk '/^VmRSS:/{print int($2/1024)}' "/proc/$pid/status")
    printf '%-24s %7s %9s\n' "$n" "$pid" "$rss"
done
if [ -s "$D/admin.token" ]; then
    r=$(curl -fsS --max-time 2 --cacert "$D/pki/ca.crt" -H "Authorization: Bearer $(cat "$D/admin.token")" \
        https://127.0.0.1:${KUBEBED_APISERVER_PORT:-6443}/readyz 2>/dev/null || echo "no answer")
    echo "kube-apiserver /readyz: $r"
fi
