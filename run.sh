#!/usr/bin/env bash
# fusetrace's two jobs on a fresh Debian 12 machine, as root:
#   ./run.sh demo          install what is missing, then run the demo and print its table
#   ./run.sh test          install what is missing, then run the quick suite (a few minutes:
#                          every test but those marked slow, which take over ten seconds each)
#   ./run.sh test --all    the same, every test (the slow ones too); what .ci/run runs
# Other arguments after `test` go to pytest as they are (-k NAME, a file, -x ...).
# Everything it needs (Debian packages, a virtualenv in .venv) it installs itself.
set -euo pipefail
cd "$(dirname "$0")"

# fio, parallel, rsync, cpio, fpart (fpsync) and tar: the tools the scenarios run; acl: setfacl for the
# tests; sqlite3 and git: real applications the fault tests run through a mount; redis-server:
# the shared state of several mounts of one emulated file system, started by the tests;
# bpftrace: `fusetrace capture`'s probes; strace: the counts its tests compare with.
APT_PACKAGES=(fuse3 libfuse3-dev pkg-config gcc python3 python3-dev python3-venv fio kmod
              parallel rsync cpio fpart tar acl sqlite3 git redis-server bpftrace strace)

install_system() {
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "run.sh: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    [ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
}

# The virtualenv is built on Debian's interpreter, named explicitly: a `python3` found first
# on the PATH may be a pyenv shim or a build under /root, which other users cannot read, and
# on an allow_other host every user must be able to run .venv/bin/fusetrace.
PYTHON=/usr/bin/python3

install_python() {
    local stamp=.venv/.installed
    local want home
    want=$(cat setup.cfg pyproject.toml | sha1sum | cut -d' ' -f1)
    # a .venv made on another interpreter (pyvenv.cfg's home says which) is made again
    home=$(sed -n 's/^home = //p' .venv/pyvenv.cfg 2>/dev/null || true)
    if [ ! -x .venv/bin/python ] || [ "$home" != "$(dirname "$PYTHON")" ]; then
        rm -rf .venv
        "$PYTHON" -m venv .venv
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        .venv/bin/pip install -q --upgrade pip >/dev/null
        .venv/bin/pip install -q -e '.[test]'
        echo "$want" > "$stamp"
    fi
}

case "${1:-}" in
    demo)
        install_system; install_python
        shift; exec .venv/bin/fusetrace demo "$@" ;;
    test)
        install_system; install_python
        shift
        select=(-m "not slow")
        args=()
        for a in "$@"; do
            if [ "$a" = --all ]; then select=(); else args+=("$a"); fi
        done
        exec .venv/bin/python -m pytest "${select[@]}" "${args[@]}" ;;
    *)
        echo "usage: ./run.sh demo [args...] | ./run.sh test [--all] [pytest args...]" >&2; exit 2 ;;
esac
