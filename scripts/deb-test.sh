#!/usr/bin/env bash
# The package, end to end, as a Debian/Ubuntu user meets it: builds the
# .deb (scripts/package-deb.sh), runs lintian, installs it with
# `apt-get install ./lazaret_*.deb`, and as a fresh unprivileged user
# follows README.md's "Install from the package" verbatim (`lazaret doctor`,
# `lazaret run -- true`, from /usr/bin/lazaret); checks that `man -w lazaret`
# finds the page, that each completion script loads in its shell and
# completes `lazaret ru` to `run`, and that AppArmor 4's apparmor_parser
# (fetched by scripts/install-deps.sh) accepts the whole profile. Removes
# the package and the user at the end, whatever happened, so the machine
# is as it was (CI runs on developers' machines too).
#
#   scripts/deb-test.sh          (as root; scripts/test.sh runs it)
#
# LAZARET_TEST_BIN: package these binaries (the test build test.sh staged)
# instead of building the release ones. The fresh user's default image is
# copied from LAZARET_TEST_USER's when that user has one, so the check
# takes a minute rather than the image build's ten (`lazaret image build
# --if-missing` then finds it); without one, or with
# LAZARET_DEB_FRESH_IMAGE=1, it is built: the README's time to first
# prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

[ "$(id -u)" -eq 0 ] || exec sudo -E -- "$0" "$@"
say() { printf 'deb-test: %s\n' "$*"; }
fail() { say "FAIL: $*"; failed=$((failed + 1)); }
failed=0
start=$SECONDS

for tool in lintian dpkg-deb apt-get man; do
    command -v "$tool" >/dev/null || { say "FAIL: $tool is missing (scripts/install-deps.sh installs it)"; exit 1; }
done
# Never replace a lazaret that some other package or hand put there.
if [ -e /usr/bin/lazaret ] && ! dpkg-query -S /usr/bin/lazaret >/dev/null 2>&1; then
    say "FAIL: /usr/bin/lazaret exists and belongs to no package: not touching it"
    exit 1
fi

work=$(mktemp -d)
chmod 0755 "$work"
user=lazaret-deb
cleanup() {
    set +e
    if id "$user" >/dev/null 2>&1; then
        # Its Domains stop with its own lazaret; then the account goes.
        run_as "$user" lazaret stop --all >/dev/null 2>&1
        userdel -r "$user" >/dev/null 2>&1
        sed -i "/^$user:/d" /etc/subuid /etc/subgid
    fi
    if dpkg-query -W -f='${Status}' lazaret 2>/dev/null | grep -q 'install ok installed'; then
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq lazaret >/dev/null 2>&1 && say "removed the package"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# 1. Build and lint.
deb=$(LAZARET_DEB_BIN_DIR=${LAZARET_TEST_BIN:-} scripts/package-deb.sh "$work")
say "built $deb ($(du -h "$deb" | cut -f1))"
# Every tag lintian reports must be an error-free one explained in
# scripts/deb/lintian-overrides; warnings and errors fail.
if lintian --fail-on error,warning --tag-display-limit 0 "$deb" > "$work/lintian.txt" 2>&1; then
    say "lintian: clean ($(grep -c . "$work/lintian.txt" || true) informational lines)"
else
    cat "$work/lintian.txt"
    fail "lintian reported errors or warnings (above)"
fi

# 2. The profile: AppArmor's parser must accept all of it. Debian 12's
# parser (3.0.8) knows neither `abi <abi/4.0>` nor the userns rule, so the
# whole profile is checked with AppArmor 4's: Debian 13's apparmor_parser,
# which scripts/install-deps.sh unpacks with the libc it needs into
# $LAZARET_TOOLS/apparmor4, run through that libc's loader. That package's
# /etc/apparmor.d is the base (abi/4.0 and the includes resolve there), its
# features file stands for the kernel's (AppArmor 4 with userns mediation:
# the userns rules are compiled, not dropped as unenforced), no config
# file of the host's is read, and warnings are errors. The host's own
# parser checks the profile too: all of it where it is AppArmor 4, else
# the rest without the abi line and userns rules.
profile=$PWD/scripts/deb/apparmor-lazaret # absolute: --base changes directory
aa4=${LAZARET_TOOLS:-/var/tmp/lazaret-tools}/apparmor4
aa4_lib=$aa4/usr/lib/x86_64-linux-gnu
if [ ! -x "$aa4/usr/sbin/apparmor_parser" ] || [ ! -x "$aa4_lib/ld-linux-x86-64.so.2" ]; then
    why="AppArmor 4's parser is not in $aa4 (scripts/install-deps.sh fetches it)"
    if [ "${LAZARET_MUST_WORK:-}" = 1 ]; then fail "$why"; else say "skipping: the whole profile's check: $why"; fi
else
    aa4_parser=("$aa4_lib/ld-linux-x86-64.so.2" --library-path "$aa4_lib" "$aa4/usr/sbin/apparmor_parser"
        --config-file /dev/null --features-file "$aa4/usr/share/apparmor-features/features"
        --base "$aa4/etc/apparmor.d" --Werror --skip-cache)
    aa4_version=$("${aa4_parser[@]}" --version | awk 'NR==1{print $NF}')
    if "${aa4_parser[@]}" --skip-kernel-load "$profile" > "$work/aa4.txt" 2>&1; then
        names=$("${aa4_parser[@]}" --names "$profile" 2>/dev/null | paste -sd ' ')
        if [ "$names" = "lazaret lazaret-runsc" ]; then
            say "apparmor_parser $aa4_version -Q accepts the whole profile (profiles: $names)"
        else
            fail "apparmor_parser $aa4_version finds the profiles '$names' in $profile, not lazaret and lazaret-runsc"
        fi
    else
        cat "$work/aa4.txt"
        fail "apparmor_parser $aa4_version -Q refused $profile (above)"
    fi
fi
if ! command -v apparmor_parser >/dev/null; then
    fail "apparmor_parser is missing (scripts/install-deps.sh installs apparmor)"
elif [ -e /etc/apparmor.d/abi/4.0 ]; then
    apparmor_parser -Q -K "$profile" && say "the host's apparmor_parser -Q accepts the profile" || fail "the host's apparmor_parser -Q refused $profile"
else
    sed -e '/^abi /d' -e '/^ *userns,/d' "$profile" > "$work/profile-3"
    if apparmor_parser -Q -K "$work/profile-3" 2>/dev/null; then
        say "the host's apparmor_parser $(apparmor_parser --version | awk 'NR==1{print $NF}') -Q accepts the profile without its abi line and userns rules (it predates both)"
    else
        fail "the host's apparmor_parser -Q refused the profile (without abi/userns)"
    fi
fi

# 3. Install as the README says.
t0=$SECONDS
(cd "$(dirname "$deb")" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "./$(basename "$deb")" >/dev/null)
installed=$SECONDS
say "installed with apt-get install ./$(basename "$deb") ($((installed - t0)) s)"
[ -x /usr/bin/lazaret ] && [ -x /usr/lib/lazaret/lazaret-init ] || fail "the binaries are not where lazaret finds them"

# A fresh unprivileged user: it runs the shells below (never root: a
# shell's completion system writes files of its own) and the README's
# commands.
ensure_user "$user" >/dev/null
home=$(getent passwd "$user" | cut -d: -f6)

# 4. The man page and the completions.
man -w lazaret >/dev/null 2>&1 && say "man -w lazaret: $(man -w lazaret)" || fail "man -w lazaret finds no page"
got=$(run_as "$user" bash -c 'source /usr/share/bash-completion/completions/lazaret
COMP_WORDS=(lazaret ru); COMP_CWORD=1; _lazaret; echo "${COMPREPLY[*]}"' 2>&1) || true
[ "$got" = run ] && say "bash completes 'lazaret ru' to run" || fail "bash: 'lazaret ru' completes to '$got'"
got=$(run_as "$user" bash -c 'source /usr/share/bash-completion/completions/lazaret
COMP_WORDS=(lazaret image b); COMP_CWORD=2; _lazaret; echo "${COMPREPLY[*]}"' 2>&1) || true
[ "$got" = build ] || fail "bash: 'lazaret image b' completes to '$got'"
if command -v fish >/dev/null; then
    got=$(run_as "$user" fish -c 'complete -C"lazaret ru"' 2>&1 | cut -f1) || true
    [ "$got" = run ] && say "fish completes 'lazaret ru' to run" || fail "fish: 'lazaret ru' completes to '$got'"
else
    fail "fish is missing (scripts/install-deps.sh installs it)"
fi
if command -v zsh >/dev/null; then
    # Loaded through compinit from Debian's vendor-completions directory,
    # then called with compadd standing in for the widget's (zsh completes
    # only inside the line editor): what it would offer for `lazaret ru`.
    # -D: no dump file.
    got=$(run_as "$user" zsh -f -c '
autoload -U compinit && compinit -u -D || exit 3
(( ${+_comps[lazaret]} )) || { echo "not registered"; exit 4; }
compadd() {
  local arr=0 a
  for a in "$@"; do
    case $a in -a) arr=1; continue ;; --|-*) continue ;; esac
    if (( arr )); then for x in ${(P)a}; do [[ $x == ${PREFIX}* ]] && print -r -- $x; done
    else [[ $a == ${PREFIX}* ]] && print -r -- $a; fi
  done
}
words=(lazaret ru); CURRENT=2; PREFIX=ru
$_comps[lazaret]' 2>&1) || true
    [ "$got" = run ] && say "zsh loads _lazaret and completes 'lazaret ru' to run" || fail "zsh: 'lazaret ru' gives '$got'"
else
    fail "zsh is missing (scripts/install-deps.sh installs it)"
fi

# 5. The fresh user follows the README: lazaret doctor, lazaret run.
src=$(getent passwd "${LAZARET_TEST_USER:-lazaret-test}" | cut -d: -f6)/.local/share/lazaret/images/default
if [ -d "$src" ] && [ -z "${LAZARET_DEB_FRESH_IMAGE:-}" ]; then
    install -d -o "$user" -g "$user" -m 0700 "$home/.local" "$home/.local/share" "$home/.local/share/lazaret" "$home/.local/share/lazaret/images"
    cp -a "$src" "$home/.local/share/lazaret/images/"
    chown -R "$user:$user" "$home/.local/share/lazaret/images"
    say "copied the default image of ${LAZARET_TEST_USER:-lazaret-test} (its build is not timed here)"
fi
ws=$home/project
install -d -o "$user" -g "$user" "$ws"
d0=$SECONDS
if (cd "$ws" && run_as "$user" lazaret doctor) > "$work/doctor.txt" 2>&1; then
    say "lazaret doctor: ok ($((SECONDS - d0)) s)"
else
    cat "$work/doctor.txt"
    fail "lazaret doctor reported problems (above)"
fi
b0=$SECONDS
if (cd "$ws" && run_as "$user" lazaret image build --quiet --if-missing) > "$work/build.txt" 2>&1; then
    say "lazaret image build: ok ($((SECONDS - b0)) s)"
else
    tail -20 "$work/build.txt"
    fail "lazaret image build (above)"
fi
r0=$SECONDS
if out=$(cd "$ws" && run_as "$user" lazaret run --quiet -- sh -c 'echo from-the-sandbox' 2>&1) &&
    printf '%s\n' "$out" | grep -qx from-the-sandbox; then
    say "lazaret run from /usr/bin/lazaret: the first prompt $((SECONDS - installed)) s after apt install ($((SECONDS - r0)) s for the run)"
else
    printf '%s\n' "$out"
    fail "lazaret run -- true as a fresh user"
fi
(cd "$ws" && run_as "$user" lazaret run --quiet -- true) || fail "lazaret run -- true"
v=$(run_as "$user" lazaret version --json)
case $v in *'"runsc_found":true'*) ;; *) fail "lazaret version --json: $v" ;; esac

say "done in $((SECONDS - start)) s"
if [ "$failed" -gt 0 ]; then
    say "$failed check(s) failed"
    exit 1
fi
say "all checks passed"
