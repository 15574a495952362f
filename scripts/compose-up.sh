#!/usr/bin/env bash
# Bring compose.yaml up for real with podman-compose, as the rootless Podman user, on
# images built offline here; run its health checks, bootstrap an admin key, run a session
# through it; then take it down. Run as root after scripts/setup-podman.sh and
# scripts/build-test-images.sh (python). Exits non-zero when any step fails.
#
#   localhost/jobgate-services:bookworm  Debian bookworm + postgresql + redis-server
#                                        (mmdebstrap -> podman import -> build --network none
#                                        adding jobgate-postgres, an entrypoint that honours
#                                        POSTGRES_USER / POSTGRES_DB / POSTGRES_PASSWORD)
#   localhost/jobgate:latest             localhost/jobgate-python:3.11 + this tree's jobgate
#                                        and its dependencies as wheels (pip download here,
#                                        pip install --no-index in `podman build --network none`);
#                                        labelled with a digest of the tree's sources and
#                                        rebuilt when they change (never a stale jobgate)
#
# scripts/compose.offline.yaml overrides the images and puts every service on the host's
# loopback with free ports (no container DNS on this host's CNI backend).
# Environment: JOBGATE_PODMAN_USER (jobgate), JOBGATE_IMAGE_CACHE (/var/cache/jobgate-images),
# JOBGATE_IMAGE_REBUILD=1 to rebuild the two images, KEEP_UP=1 to leave the project running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
USER_NAME=${JOBGATE_PODMAN_USER:-jobgate}
CACHE=${JOBGATE_IMAGE_CACHE:-/var/cache/jobgate-images}/compose
MIRROR=${JOBGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REBUILD=${JOBGATE_IMAGE_REBUILD:-0}
SERVICES=localhost/jobgate-services:bookworm
JOBGATE=localhost/jobgate:latest
PYTHON=localhost/jobgate-python:3.11
PROJECT=jobgate-compose-test

say() { echo "compose-up: $*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (it builds images and runs podman-compose as $USER_NAME)"
USER_UID=$(id -u "$USER_NAME") || die "no user $USER_NAME: run scripts/setup-podman.sh"
USER_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)
mkdir -p "$CACHE" && chmod 755 "$CACHE"

as_user() { (cd "$WORK" && runuser -u "$USER_NAME" -- env HOME="$USER_HOME" \
    XDG_RUNTIME_DIR="/run/user/$USER_UID" PATH="$CACHE/pc-venv/bin:/usr/bin:/bin" "$@"); }
upodman() { as_user podman "$@"; }
WORK=$(mktemp -d /tmp/jobgate-compose.XXXXXX)
chown "$USER_NAME" "$WORK"
compose() { as_user podman-compose -p "$PROJECT" -f compose.yaml -f compose.offline.yaml "$@"; }
down() {
    [[ ${KEEP_UP:-0} == 1 ]] && { say "left running: project $PROJECT in $WORK"; return; }
    compose --profile tools down -v -t 5 >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap down EXIT

# ---- images ------------------------------------------------------------------------------
need() { [[ $REBUILD == 1 ]] || ! upodman image exists "$1"; }
# what the jobgate image is built from (copied below), and a digest of it for its label
SOURCES=(pyproject.toml README.md contract plumbing gateway workers plugins appproxy migrations jobgate)
SOURCE=$(find "${SOURCES[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32)
built_from() { upodman image inspect --format '{{index .Labels "jobgate.source"}}' "$1" 2>/dev/null; }
need_jobgate() { need "$JOBGATE" || [[ $(built_from "$JOBGATE") != "$SOURCE" ]]; }

if need "$SERVICES"; then
    if [[ ! -s $CACHE/services-rootfs.tar ]]; then
        command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install \
            -y -q --no-install-recommends mmdebstrap >/dev/null
        say "Debian rootfs with postgresql and redis-server (mmdebstrap, ~1 min)"
        # shellcheck disable=SC2016  # $1 is the hook's argument
        mmdebstrap --quiet --variant=apt --mode=root \
            --include=postgresql,redis-server,tini,ca-certificates \
            --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
            bookworm "$CACHE/services-rootfs.part.tar" "$MIRROR" >/dev/null
        mv "$CACHE/services-rootfs.part.tar" "$CACHE/services-rootfs.tar"
    fi
    ctx=$CACHE/services-ctx
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp scripts/jobgate-postgres.sh "$ctx/jobgate-postgres"
    cat >"$ctx/Containerfile" <<EOF
FROM localhost/jobgate-services-base:bookworm
COPY jobgate-postgres /usr/local/bin/jobgate-postgres
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8
EOF
    chmod -R a+rX "$ctx" && chmod 755 "$ctx/jobgate-postgres"
    chmod a+r "$CACHE/services-rootfs.tar"
    upodman import -q "$CACHE/services-rootfs.tar" localhost/jobgate-services-base:bookworm >/dev/null
    upodman build -q --network none -t "$SERVICES" "$ctx" >/dev/null
    say "built $SERVICES"
fi

if need_jobgate; then
    upodman image exists "$PYTHON" || die "no $PYTHON: run scripts/build-test-images.sh python"
    ctx=$CACHE/jobgate-ctx
    rm -rf "$ctx" && mkdir -p "$ctx/wheels"
    say "wheels of jobgate and its dependencies (pip download, cp311 manylinux)"
    # from a copy: setuptools leaves build/ behind, and would reuse a stale one
    mkdir -p "$ctx/src"
    cp -r "${SOURCES[@]}" "$ctx/src/"
    find "$ctx/src" -name __pycache__ -prune -exec rm -rf {} +
    .venv/bin/python -m pip wheel -q --no-deps --wheel-dir "$ctx/wheels" "$ctx/src" >/dev/null
    rm -rf "$ctx/src"
    deps=$(.venv/bin/python - <<'EOF'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
EOF
)
    mapfile -t reqs <<<"$deps"  # + async-timeout: redis needs it below 3.11.3 (Debian: 3.11.2)
    .venv/bin/python -m pip download -q --disable-pip-version-check --dest "$CACHE/wheels" \
        --only-binary=:all: --python-version 3.11.2 --implementation cp --abi cp311 \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 "${reqs[@]}" pip async-timeout >"$CACHE/pip.log" 2>&1 ||
        { tail -n 20 "$CACHE/pip.log" >&2; die "pip download failed"; }
    cp "$CACHE"/wheels/*.whl "$ctx/wheels/"
    cat >"$ctx/Containerfile" <<EOF
FROM $PYTHON
LABEL jobgate.source=$SOURCE
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv /opt/jobgate \\
 && /opt/jobgate/bin/pip install -q --no-index --find-links=/wheels jobgate \\
 && rm -rf /root/.cache \\
 && useradd --create-home --uid 1000 --user-group jobgate \\
 && install -d -o jobgate -g jobgate -m 0700 /var/lib/jobgate
ENV PATH=/opt/jobgate/bin:/usr/local/bin:/usr/bin:/bin PYTHONUNBUFFERED=1
USER jobgate
WORKDIR /home/jobgate
ENTRYPOINT ["jobgate"]
CMD ["--help"]
EOF
    chmod -R a+rX "$ctx"
    say "building $JOBGATE (podman build --network none)"
    upodman build -q --network none -t "$JOBGATE" "$ctx" >/dev/null
    say "built $JOBGATE"
fi

# ---- podman-compose ----------------------------------------------------------------------
if [[ ! -x $CACHE/pc-venv/bin/podman-compose ]]; then
    say "installing podman-compose (PyPI) in $CACHE/pc-venv"
    /usr/bin/python3 -m venv "$CACHE/pc-venv"  # not a /root python: the Podman user runs it
    "$CACHE/pc-venv/bin/pip" install -q --disable-pip-version-check podman-compose
    chmod -R a+rX "$CACHE/pc-venv"
fi

# ---- up ----------------------------------------------------------------------------------
free() { .venv/bin/python -c 'from jobgate.localnet import free_port; print(free_port())'; }
secret() { .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(24))'; }
cp compose.yaml scripts/compose.offline.yaml "$WORK/"
cat >"$WORK/.env" <<EOF
POSTGRES_PASSWORD=$(secret)
REDIS_PASSWORD=$(secret)
JOBGATE_JOIN_TOKEN=$(secret)
JOBGATE_PROXY_SECRET=$(secret)
PG_PORT=$(free)
REDIS_PORT=$(free)
GATEWAY_PORT=$(free)
PROXY_PORT=$(free)
EOF
chmod 600 "$WORK/.env"
chown -R "$USER_NAME" "$WORK" && chmod 700 "$WORK"  # the secrets: the Podman user's alone
# shellcheck disable=SC1091
source "$WORK/.env"


healthy() {  # container: run its health check (no systemd here to run them on a timer)
    upodman healthcheck run "$1" >/dev/null 2>&1
}
wait_healthy() {
    local service name=${PROJECT}_$1_1
    service=$1
    for _ in $(seq 120); do healthy "$name" && break; sleep 0.5; done
    healthy "$name" || { upodman logs --tail 30 "$name" >&2 || true; die "$service is not healthy"; }
    say "$service: health check passed"
}
# Podman 4.3 cannot wait for "healthy" (podman-compose skips those conditions) and fails to
# start a container whose --requires chain has an exited one (migrate), so the order
# compose.yaml's depends_on gives is followed here, one stage at a time, with --no-deps.
up() { compose up -d --no-deps "$@" >>"$WORK/up.log" 2>&1 ||
    { tail -n 40 "$WORK/up.log" >&2; die "compose up $* failed"; }; }
say "podman-compose up, in depends_on order (project $PROJECT)"
up postgres redis
wait_healthy postgres
wait_healthy redis
up migrate
state=$(upodman wait "${PROJECT}_migrate_1" 2>/dev/null || true)
[[ $state == 0 ]] || { upodman logs "${PROJECT}_migrate_1" >&2 || true; die "migrate exited $state"; }
say "migrate: jobgate db upgrade done"
up gateway scheduler
wait_healthy gateway
up appproxy worker
wait_healthy appproxy

say "bootstrap: the first admin key"
key=$(compose --profile tools run --rm --no-deps bootstrap 2>"$WORK/bootstrap.log" | tail -n 1 | tr -d '\r')
[[ $key == jg_* ]] || { grep -v systemd "$WORK/bootstrap.log" | tail -n 20 >&2; die "bootstrap printed no key"; }

say "a session through the gateway, scheduler and worker"
export JOBGATE_URL="http://127.0.0.1:$GATEWAY_PORT" JOBGATE_API_KEY=$key
export JOBGATE_CONFIG=$WORK/profile.toml
for _ in $(seq 120); do
    .venv/bin/jobgate nodes ls -o json 2>/dev/null | grep -q compose-worker-1 && break
    sleep 0.5
done
out=$(.venv/bin/jobgate run -- python3 -c 'print("hello from compose", 6 * 7)')
echo "$out"
grep -q "hello from compose 42" <<<"$out" || die "the session did not print its line"
say "ok: compose.yaml is up, healthy, and ran a session"
