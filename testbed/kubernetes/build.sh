#!/usr/bin/env bash
# Build real Kubernetes v1.20.2 control-plane binaries (kube-apiserver,
# kube-controller-manager, optionally more) from Debian's `kubernetes` source
# package, with Debian's Go 1.19, fully offline (vendored tree, GOPROXY=off).
#
# Idempotent: exits early when every requested binary already exists in
# $KUBE_PREFIX/bin and reports v1.20.2.  FORCE=1 rebuilds.
#
# Env knobs:
#   KUBE_PREFIX  install prefix                       (default /opt/kube-1.20)
#   WHAT         space separated cmd/ names to build  (default "kube-apiserver kube-controller-manager kubectl")
#                e.g. WHAT="kube-apiserver kube-controller-manager kubectl kube-scheduler"
#   FORCE=1      rebuild even if binaries exist
#   SKIP_APT=1   do not apt-get install anything (assume go/etcd present)
#
# Patches applied to the vendored tree (see patches/):
#   fix-modules-txt.py  - reorders vendor/modules.txt header lines so Go >= 1.17 accepts
#     -mod=vendor (otherwise: "go: updates to go.mod needed, disabled by -mod=vendor").
#   0001-reflect2-go1.18-mapiterinit.patch  - github.com/modern-go/reflect2 v1.0.1
#     links reflect.mapiterinit with its pre-Go-1.18 signature; with Go >= 1.18 any
#     json-iterator map encode (apiserver pretty/YAML output, e.g. `curl .../api/v1/nodes`
#     of an object with labels) segfaults.  Backport of reflect2 v1.0.2's fix.
set -euo pipefail

KUBE_VERSION=v1.20.2
KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56   # from git-archive export-subst in the tarball
KUBE_PREFIX=${KUBE_PREFIX:-${BERTH_CACHE:-$HOME/.cache/berth}/kube-1.20.2}
BIN=$KUBE_PREFIX/bin
SRC_PARENT=$KUBE_PREFIX/src
SRC=$SRC_PARENT/kubernetes-1.20.2
DL=$KUBE_PREFIX/dl
WHAT=${WHAT:-"kube-apiserver kube-controller-manager kubectl"}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GO=/usr/lib/go-1.19/bin/go
LOG=$KUBE_PREFIX/build.log

log() { echo "[build.sh] $*" >&2; }

have_all() {
  local b
  for b in $WHAT; do
    [[ -x $BIN/$b ]] || return 1
    "$BIN/$b" --version 2>/dev/null | grep -q "$KUBE_VERSION" || \
      "$BIN/$b" version --client 2>/dev/null | grep -q "$KUBE_VERSION" || return 1
  done
}

if [[ ${FORCE:-0} != 1 ]] && have_all; then
  log "all of [$WHAT] present in $BIN at $KUBE_VERSION; nothing to do (FORCE=1 to rebuild)"
  exit 0
fi

mkdir -p "$BIN" "$SRC_PARENT" "$DL"

# --- toolchain + runtime deps from Debian ------------------------------------
apt_ensure() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  }
}
if [[ ${SKIP_APT:-0} != 1 ]]; then
  apt_ensure golang-1.19-go etcd-server etcd-client openssl patch
fi
[[ -x $GO ]] || { log "missing $GO (apt-get install golang-1.19-go)"; exit 1; }

# --- source: Debian's kubernetes source package (orig tarball has vendor/) -----
if [[ ! -f $SRC/go.mod ]]; then
  ORIG=$(ls "$DL"/kubernetes_*really1.20.2.orig.tar.gz /tmp/k8ssrc/kubernetes_*really1.20.2.orig.tar.gz 2>/dev/null | head -n1 || true)
  if [[ -z $ORIG ]]; then
    if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      log "adding a deb-src entry for bookworm (needed by apt-get source)"
      cat >/etc/apt/sources.list.d/kube-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
      apt-get update >/dev/null
    fi
    log "apt-get source --download-only kubernetes -> $DL"
    (cd "$DL" && apt-get source --download-only kubernetes >/dev/null 2>&1) || {
      apt-get update >/dev/null
      (cd "$DL" && apt-get source --download-only kubernetes >/dev/null)
    }
    ORIG=$(ls "$DL"/kubernetes_*really1.20.2.orig.tar.gz | head -n1)
  fi
  log "extracting $ORIG"
  tar -C "$SRC_PARENT" -xzf "$ORIG"
fi

# --- patches (idempotent) -------------------------------------------------------
for p in "$HERE"/patches/*.patch; do
  [[ -e $p ]] || continue
  if patch -d "$SRC" -p1 -R --dry-run -s -f <"$p" >/dev/null 2>&1; then
    log "patch already applied: $(basename "$p")"
  else
    log "applying $(basename "$p")"
    patch -d "$SRC" -p1 -s -f <"$p"
  fi
done

# Go >= 1.17 misreads Go 1.15's vendor/modules.txt layout (packages listed under the
# wildcard `# X => X vN` line get version ""), failing every -mod=vendor command with
# "updates to go.mod needed".  Reorder header lines (no line added/removed; idempotent).
python3 "$HERE/patches/fix-modules-txt.py" "$SRC/vendor/modules.txt" >&2

# --- build env ------------------------------------------------------------------
export PATH=/usr/lib/go-1.19/bin:$PATH
export GO111MODULE=on GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off GONOSUMDB='*' CGO_ENABLED=0
export GOPATH=$KUBE_PREFIX/gopath GOCACHE=$KUBE_PREFIX/gocache
cd "$SRC"

# --- generated OpenAPI definitions ---------------------------------------------------
# The release tarball ships every zz_generated file except pkg/generated/openapi/
# zz_generated.openapi.go, which upstream's `make` generates at build time (without it:
# "cmd/kube-apiserver/app/server.go: undefined: openapi.GetOpenAPIDefinitions").
# Reproduce Makefile.generated_files' gen_openapi for the KUBE target: openapi-gen
# (gengo, GOPATH mode) over every dir tagged +k8s:openapi-gen=, then check the API-rule
# violation report equals api/api-rules/violation_exceptions.list as upstream does.
OPENAPI_OUT=$SRC/pkg/generated/openapi/zz_generated.openapi.go
if [[ ! -s $OPENAPI_OUT ]]; then
  log "generating $OPENAPI_OUT"
  mkdir -p "$KUBE_PREFIX/tools" "$GOPATH/src/k8s.io" "$SRC/_output"
  "$GO" build -o "$KUBE_PREFIX/tools/openapi-gen" k8s.io/kube-openapi/cmd/openapi-gen
  ln -sfn "$SRC" "$GOPATH/src/k8s.io/kubernetes"
  # ALL_GO_DIRS (hack/make-rules/helpers/cache_go_dirs.sh) -> +k8s: tag files -> openapi dirs
  find -H . \( -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) \) -type f -name '*.go' \
    | sed 's|^./staging/src|vendor|; s|/[^/]*$||; s|^./||' | LC_ALL=C sort -u >"$SRC/_output/all_go_dirs"
  while read -r d; do ls "$d"/*.go 2>/dev/null || true; done <"$SRC/_output/all_go_dirs" \
    | xargs grep --color=never -l '^// *+k8s:' 2>/dev/null \
    | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
    | xargs grep --color=never -l '+k8s:openapi-gen=' | xargs -n1 dirname | LC_ALL=C sort -u \
    >"$SRC/_output/kube_openapi_dirs"
  inputs=$(sed 's|^|k8s.io/kubernetes/|' "$SRC/_output/kube_openapi_dirs" | paste -sd, -)
  (cd "$GOPATH/src/k8s.io/kubernetes" && env -u GOFLAGS GO111MODULE=off \
    "$KUBE_PREFIX/tools/openapi-gen" --logtostderr -i "$inputs" \
      -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
      -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
      -r _output/KUBE_violations.report)
  diff -q "$SRC/_output/KUBE_violations.report" "$SRC/api/api-rules/violation_exceptions.list" >/dev/null \
    || log "WARNING: API rule violation report differs from api/api-rules/violation_exceptions.list"
  [[ -s $OPENAPI_OUT ]] || { log "openapi-gen produced nothing"; exit 1; }
fi

# --- build ----------------------------------------------------------------------
BUILD_DATE=$(date -u +'%Y-%m-%dT%H:%M:%SZ')
ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
  ld+=" -X $pkg.gitCommit=$KUBE_GIT_COMMIT -X $pkg.gitTreeState=archive -X $pkg.buildDate=$BUILD_DATE"
done
LDFLAGS="-s -w$ld"
log "go: $($GO version); building [$WHAT] (log: $LOG)"
for b in $WHAT; do
  if [[ ${FORCE:-0} != 1 ]] && [[ -x $BIN/$b ]] && { "$BIN/$b" --version 2>/dev/null || "$BIN/$b" version --client 2>/dev/null; } | grep -q "$KUBE_VERSION"; then
    log "$b: present, skipping"; continue
  fi
  log "building $b ..."
  start=$(date +%s)
  /usr/bin/time -f "$b: wall=%es user=%Us sys=%Ss maxrss=%MKB" -a -o "$LOG" \
    "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$BIN/$b.tmp" "./cmd/$b"
  mv -f "$BIN/$b.tmp" "$BIN/$b"
  log "$b: built in $(( $(date +%s) - start ))s ($(du -h "$BIN/$b" | cut -f1)); $(tail -n1 "$LOG")"
done
for b in $WHAT; do
  "$BIN/$b" --version 2>/dev/null || "$BIN/$b" version --client 2>/dev/null | head -n1
done
