# shellcheck shell=bash
# Sourced by scripts/setup-podman.sh and scripts/setup-slurm.sh (which define say()).
#
# install_missing PKG...: apt-get installs those of Debian's packages PKG... that dpkg
# does not list as installed, quietly, without recommends; an `apt-get update` comes
# first only when that install fails (a stale or missing package index).
install_missing() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    }
}
