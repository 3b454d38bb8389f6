#!/usr/bin/env bash
# Install the host packages Lazaret drives. Idempotent: prints only what it changes.
# Runs as root, or re-executes itself with sudo. With --bench it also
# fetches the inputs of scripts/bench-workloads.sh (the tests need none).
#
#   scripts/install-deps.sh [--bench]
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    exec sudo -- "$0" "$@"
fi

say() { printf 'install-deps: %s\n' "$*"; }

. /etc/os-release
codename=${VERSION_CODENAME:?cannot read VERSION_CODENAME from /etc/os-release}

# runsc >= 20240729 lives in backports on bookworm. Reuse the Debian mirror
# that apt already uses rather than naming one here.
runsc_min=20240729
need_backports=0
if [ "$codename" = bookworm ]; then
    need_backports=1
fi

mirror_uri() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk '
            /^[[:space:]]*$/ { if (deb && suite && uri != "") { print uri; exit } ; deb=0; suite=0; uri=""; next }
            /^Types:/ && /deb( |$)/ { deb=1 }
            /^URIs:/ { uri=$2 }
            /^Suites:/ { for (i=2;i<=NF;i++) if ($i == c) suite=1 }
            END { if (deb && suite && uri != "") print uri }' c="$codename" "$f" | head -n1)
        if [ -n "$uri" ]; then printf '%s\n' "$uri"; return 0; fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk -v c="$codename" '$1=="deb" && $3==c { print $2; exit }' "$f")
        if [ -n "$uri" ]; then printf '%s\n' "$uri"; return 0; fi
    done
    return 1
}

updated=0
apt_update() {
    if [ "$updated" -eq 0 ]; then
        say "apt-get update"
        apt-get update -qq
        updated=1
    fi
}

if [ "$need_backports" -eq 1 ]; then
    bp=/etc/apt/sources.list.d/lazaret-backports.sources
    if ! grep -rqs -- "${codename}-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        uri=$(mirror_uri) || { say "cannot find the configured Debian mirror for $codename in /etc/apt"; exit 1; }
        say "adding ${codename}-backports from $uri to $bp"
        cat > "$bp" <<SRC
Types: deb
URIs: $uri
Suites: ${codename}-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        updated=0
    fi
fi

# lintian, apparmor (apparmor_parser), zsh, fish and man-db: the package
# check (scripts/deb-test.sh) lints the .deb, parses the AppArmor profile,
# loads each completion script in its shell and looks up the man page.
# openssh-server: the SSH agent's push test runs its own unprivileged sshd
# in a test namespace (the system service is not used).
pkgs=(slirp4netns fuse-overlayfs umoci skopeo uidmap debootstrap arch-test wget gpgv git tmux iproute2 nftables
      procps util-linux ca-certificates pkg-config libssl-dev python3 hyperfine openssh-server
      lintian apparmor zsh fish man-db)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt_update
    say "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

runsc_version() {
    command -v runsc >/dev/null 2>&1 || { echo 0; return; }
    runsc --version 2>/dev/null | awk '/runsc version/ { v=$3; sub(/^.*~/, "", v); sub(/^release-/, "", v); sub(/\..*/, "", v); print v; exit }'
}
rv=$(runsc_version)
if [ "${rv:-0}" -lt "$runsc_min" ] 2>/dev/null || [ -z "$rv" ]; then
    apt_update
    if [ "$need_backports" -eq 1 ]; then
        say "installing runsc from ${codename}-backports"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t "${codename}-backports" runsc >/dev/null
    else
        say "installing runsc"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null
    fi
    rv=$(runsc_version)
fi
if [ "${rv:-0}" -lt "$runsc_min" ] 2>/dev/null; then
    say "runsc version ${rv:-none} is older than $runsc_min; Lazaret needs $runsc_min or newer"
    exit 1
fi

# Device nodes: no udev here, so they may be root-only. Stock udev uses 0666.
for dev in /dev/net/tun /dev/fuse; do
    if [ -c "$dev" ] && [ "$(stat -c %a "$dev")" != 666 ]; then
        say "chmod 0666 $dev"
        chmod 0666 "$dev"
    fi
done

# The real agents of the agent end-to-end test (tests/fixtures/agents/
# real-agents.txt), each fetched once from the npm registry into an npm
# cache the test installs from offline inside a Domain. A changed line
# fetches again.
tools=${LAZARET_TOOLS:-/var/tmp/lazaret-tools}
agents_list=$(dirname "$0")/../tests/fixtures/agents/real-agents.txt
if [ -f "$agents_list" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        apt_update
        say "installing: npm"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    fi
    while read -r name specs; do
        case $name in ''|'#'*) continue ;; esac
        cache=$tools/agents/$name
        [ "$(cat "$cache/.lazaret-specs" 2>/dev/null)" = "$specs" ] && continue
        say "fetching $specs into $cache"
        rm -rf "$cache"
        install -d -m 0755 "$tools" "$tools/agents"
        # shellcheck disable=SC2086 # one word per package spec
        if ! npm cache add --cache "$cache" $specs >/dev/null; then
            say "cannot fetch $specs: the agent end-to-end test will fail"
            rm -rf "$cache"
            continue
        fi
        printf '%s\n' "$specs" > "$cache/.lazaret-specs"
        chmod -R a+rX "$cache"
    done < "$agents_list"
fi

# The inputs of scripts/bench-workloads.sh (tests/fixtures/bench/), fetched
# once so that the benchmark itself never touches the network: the npm
# packages of its package-lock.json in an npm cache, the wheels of its
# requirements.txt (for the bench image's Python, Debian bookworm's 3.11),
# and the crates of its Cargo.lock, checked against the lock's SHA-256 and
# unpacked as a vendored directory source. A changed fixture fetches again.
# Only with --bench: the tests need none of it.
fixtures=$(dirname "$0")/../tests/fixtures/bench
bench=$tools/bench
[ "${1:-}" = --bench ] || fixtures=/nonexistent
fetched() { [ "$(cat "$1/.lazaret-fixture" 2>/dev/null)" = "$(sha256sum < "$2")" ]; }
mark() { sha256sum < "$2" > "$1/.lazaret-fixture"; chmod -R a+rX "$1"; }
if [ -d "$fixtures" ]; then
    install -d -m 0755 "$tools" "$bench"
    lock=$fixtures/npm/package-lock.json
    if ! fetched "$bench/npm-cache" "$lock"; then
        command -v npm >/dev/null 2>&1 || { apt_update; say "installing: npm"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
        say "fetching the packages of $lock into $bench/npm-cache"
        rm -rf "$bench/npm-cache"
        # Every name@version the lock installs (node_modules/a/node_modules/b is b).
        # shellcheck disable=SC2046 # one word per package spec
        if npm cache add --cache "$bench/npm-cache" $(python3 -c '
import json, sys
for k, v in json.load(open(sys.argv[1]))["packages"].items():
    if k:
        print(k.rsplit("node_modules/", 1)[1] + "@" + v["version"])' "$lock") >/dev/null; then
            mark "$bench/npm-cache" "$lock"
        else
            say "cannot fetch the npm packages: bench-workloads.sh will fail"
            rm -rf "$bench/npm-cache"
        fi
    fi
    req=$fixtures/requirements.txt
    if ! fetched "$bench/wheels" "$req"; then
        python3 -m pip --version >/dev/null 2>&1 || { apt_update; say "installing: python3-pip"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null; }
        say "fetching the wheels of $req into $bench/wheels"
        rm -rf "$bench/wheels"
        if python3 -m pip download --isolated --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --python-version 3.11 --implementation cp --abi cp311 \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
            -r "$req" -d "$bench/wheels" >/dev/null; then
            mark "$bench/wheels" "$req"
        else
            say "cannot fetch the wheels: bench-workloads.sh will fail"
            rm -rf "$bench/wheels"
        fi
    fi
    clock=$fixtures/crate/Cargo.lock
    if ! fetched "$bench/crates" "$clock"; then
        say "fetching the crates of $clock into $bench/crates"
        rm -rf "$bench/crates"
        install -d -m 0755 "$bench/crates"
        ok=1
        while read -r name version sum; do
            f=$bench/crates/$name-$version.crate
            if wget -q -O "$f" "https://static.crates.io/crates/$name/$name-$version.crate" &&
                [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$sum" ]; then
                tar -xzf "$f" -C "$bench/crates" && rm "$f"
                printf '{"files":{},"package":"%s"}\n' "$sum" > "$bench/crates/$name-$version/.cargo-checksum.json"
            else
                say "cannot fetch $name $version (or its checksum differs from the lock's)"
                ok=0
            fi
        done < <(awk -F'"' '/^name = / {n=$2} /^version = / {v=$2} /^checksum = / {print n, v, $2}' "$clock")
        if [ "$ok" -eq 1 ]; then mark "$bench/crates" "$clock"; else say "bench-workloads.sh will fail"; rm -rf "$bench/crates"; fi
    fi
fi

# AppArmor 4's parser, for scripts/deb-test.sh: Debian 12's apparmor
# (3.0.8) knows neither `abi <abi/4.0>` nor the `userns` rule of the
# package's profile (scripts/deb/apparmor-lazaret), so the whole profile is
# checked with Debian 13's apparmor_parser. It needs a newer libc than
# Debian 12's (GLIBC_2.38) and links nothing else, so Debian 13's libc6
# comes with it; deb-test runs the parser through that libc's loader. Both
# .debs are pinned by pool path (which names the exact version) and SHA-256
# (from dists/trixie/main/binary-amd64/Packages.xz), checked before use,
# and unpacked with dpkg-deb -x into $tools/apparmor4 (nothing is installed
# into the system). A changed pin fetches again.
apparmor4_debs='pool/main/a/apparmor/apparmor_4.1.0-1_amd64.deb a08bf026cde3895f76d27cb5f9ba3d31d0ecf8b5b00cab9b70edaa7473d4b0a1
pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb b59b0625cd1a791375d40dab23a4d5d3d0641e3d0a773501becdc3725b7f99cf'
aa4=$tools/apparmor4
# trixie_current PKG DIR: prints "Filename SHA256" of PKG's current amd64
# build in Debian 13, read from the Packages index whose SHA-256 the
# InRelease file names, whose signature gpgv checks against Debian 13's
# archive keys (debian-archive-keyring). Fails on any mismatch or a bad
# signature.
trixie_current() {
    local pkg=$1 d=$2/index want
    if [ ! -s "$d/Packages" ]; then
        mkdir -p "$d"
        wget -q -O "$d/InRelease" https://deb.debian.org/debian/dists/trixie/InRelease || return 1
        # InRelease also carries signatures by keys newer than this
        # keyring (gpgv then exits non-zero): a good signature by a Debian 13
        # key and no bad one is what counts.
        gpgv --status-fd 3 --keyring /usr/share/keyrings/debian-archive-trixie-automatic.gpg \
            --keyring /usr/share/keyrings/debian-archive-trixie-stable.gpg \
            --output "$d/Release" "$d/InRelease" 3> "$d/status" 2>/dev/null || true
        grep -q '^\[GNUPG:\] VALIDSIG ' "$d/status" && ! grep -q '^\[GNUPG:\] BADSIG ' "$d/status" || return 1
        want=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
                    s && $3 == "main/binary-amd64/Packages.xz" { print $1 }' "$d/Release")
        wget -q -O "$d/Packages.xz" https://deb.debian.org/debian/dists/trixie/main/binary-amd64/Packages.xz || return 1
        [ -n "$want" ] && [ "$(sha256sum < "$d/Packages.xz" | cut -d' ' -f1)" = "$want" ] || return 1
        xz -dc "$d/Packages.xz" > "$d/Packages" || return 1
    fi
    awk -v p="$pkg" '/^Package: / { m = ($2 == p); f = ""; s = "" }
        m && /^Filename: / { f = $2 } m && /^SHA256: / { s = $2 }
        /^$/ { if (m && f != "" && s != "") { print f, s; found = 1; exit } }
        END { exit !found }' "$d/Packages"
}
if [ "$(dpkg --print-architecture)" != amd64 ]; then
    say "not fetching AppArmor 4's parser: its pins are for amd64 (deb-test.sh's check of the whole profile will skip)"
elif ! fetched "$aa4" <(printf '%s\n' "$apparmor4_debs"); then
    say "fetching AppArmor 4's parser (Debian 13's apparmor and libc6) into $aa4"
    rm -rf "$aa4"
    install -d -m 0755 "$tools" "$aa4"
    dl=$(mktemp -d)
    ok=1
    while read -r path sum; do
        f=$dl/${path##*/}
        url=https://deb.debian.org/debian/$path
        if ! wget -q -O "$f" "$url"; then
            # Debian drops a superseded version from the pool at a point
            # release: take the package's current build from the index
            # Debian signed instead.
            pkg=${path##*/}
            pkg=${pkg%%_*}
            if ! cur=$(trixie_current "$pkg" "$dl") || ! read -r path sum <<< "$cur" ||
                ! wget -q -O "$f" "https://deb.debian.org/debian/$path"; then
                say "cannot fetch $url, nor $pkg's current build from trixie's signed index (to pin another, take its Filename and SHA256 from dists/trixie/main/binary-amd64/Packages.xz into apparmor4_debs in $0)"
                ok=0
                break
            fi
            say "$url is gone: using $pkg's current build $path (SHA-256 from trixie's signed index)"
        fi
        got=$(sha256sum < "$f" | cut -d' ' -f1)
        if [ "$got" != "$sum" ]; then
            say "${path##*/}: SHA-256 is $got, the pin in $0 says $sum: not using it"
            ok=0
            break
        fi
        if ! dpkg-deb -x "$f" "$aa4"; then
            say "cannot unpack ${path##*/} into $aa4"
            ok=0
            break
        fi
    done <<< "$apparmor4_debs"
    rm -rf "$dl"
    lib=$aa4/usr/lib/x86_64-linux-gnu
    if [ "$ok" -eq 1 ] && ! "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$aa4/usr/sbin/apparmor_parser" --version >/dev/null; then
        say "$aa4/usr/sbin/apparmor_parser does not run through its libc's loader"
        ok=0
    fi
    if [ "$ok" -ne 1 ]; then
        rm -rf "$aa4"
        say "deb-test.sh cannot check the whole AppArmor profile without it"
        exit 1
    fi
    mark "$aa4" <(printf '%s\n' "$apparmor4_debs")
fi

say "ok (runsc $rv)"
