#!/usr/bin/env bash
# Network benchmark, one invocation:
#  1. cold start `lazaret run -- true` with the network (slirp4netns, policy,
#     probe) vs a profile with `network.mode = "none"`;
#  2. TCP throughput of 256 MiB over one connection, sandbox -> test host vs
#     host -> test host, and the same from a plain namespace behind
#     slirp4netns alone (the user-mode relay's own floor);
#  3. allow-by-name mode (network.hosts, docs/network.md): cold start vs
#     today's default, a 256 MiB TLS download from a test host through the
#     egress gate vs the forwarded path, and 100 sequential HTTPS GETs (new
#     connection each) through the gate vs forwarded (ms per connection);
#  4. secrets (issue 31, acceptance 5's throughput half): the same 256 MiB
#     TLS download with a secret bound to bench.test, so the gate
#     terminates TLS and scans the response, vs passed through by SNI
#     (target >= 0.8x); and the latency half: a 60-second server-sent-events
#     stream (an event every 100 ms, each stamped with the server's send
#     time) through the terminated connection, each event's delay measured
#     at arrival inside (target: every event within 50 ms), with a shorter
#     passed-through stream for reference.
# Prints medians and ratios. Run as root: it builds the test "internet" (a
# test host namespace on 198.18.0.0/15 behind a veth; no packet leaves the
# machine), then runs lazaret as the test user.
#
# With BENCH_BASELINE_BIN=DIR (a directory holding another build's lazaret,
# lazaret-init and lazaret-escalate, readable by the test user), the same
# invocation measures that build too, interleaved round by round, and
# prints both sets of ratios and after/before: how a change (for example
# the router hop) moves cold start, throughput and the connection setup
# through the egress gate on the same machine under the same load.
#
#   [BENCH_BASELINE_BIN=DIR] scripts/bench-net.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-7}
mib=${BENCH_MIB:-256}
. "$here/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "bench-net.sh: run as root (it creates namespaces)" >&2; exit 2; }
cd "$here/.."
user=${LAZARET_TEST_USER:-lazaret-test}
ensure_user "$user" >/dev/null
cargo build --release --locked 2>&1 | tail -n 1
bindir=$(stage_binaries "$user")
run_as "$user" "$bindir/lazaret" image build --quiet --if-missing
lz="$bindir/lazaret"
home=$(getent passwd "$user" | cut -d: -f6)

ns=lzbench-$$; link=lzb$$; hip=198.19.254.1; thip=198.19.254.2
work=$(mktemp -d "$home/bench-net.XXXXXX"); chown "$user:" "$work"
cleanup() {
    [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true
    [ -n "${srv2:-}" ] && kill "$srv2" 2>/dev/null || true
    [ -n "${slirp:-}" ] && kill "$slirp" 2>/dev/null || true
    ip link del "$link" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip netns del "$ns-slirp" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$link" type veth peer name eth0 netns "$ns"
ip addr add "$hip/30" dev "$link"; ip link set "$link" up
ip -n "$ns" addr add "$thip/30" dev eth0; ip -n "$ns" link set eth0 up; ip -n "$ns" link set lo up
# Sink: counts bytes until EOF, answers the count.
ip netns exec "$ns" /usr/bin/python3 -c '
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000)); s.listen(16)
def serve(c):
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d: break
        n += len(d)
    c.sendall(str(n).encode()); c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
' "$thip" & srv=$!
# TLS (test CA made here) on 443: GET /big sends BENCH_MIB MiB, anything
# else a short body; DNS on 53: bench.test -> the test host.
( cd "$work" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca \
    && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=bench.test \
    && printf 'subjectAltName=DNS:bench.test\n' > ext \
    && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext ) \
    >/dev/null 2>&1
ip netns exec "$ns" /usr/bin/python3 -c '
import socket, ssl, sys, threading, time
ip, cert, key, mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, 443)); s.listen(64)
def serve(c):
    try:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = ctx.wrap_socket(c, server_side=True)
        req = c.recv(4096)
        if req.startswith(b"GET /sse"):
            # GET /sse?n=N: N events, 100 ms apart, each "data: <send ns>".
            n = int(req.split(b"n=", 1)[1].split(b" ", 1)[0])
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")
            for _ in range(n):
                time.sleep(0.1)
                c.sendall(b"data: %d\n\n" % time.time_ns())
        elif req.startswith(b"GET /big"):
            n = mib << 20; buf = b"\0" * (1 << 20)
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
            for _ in range(mib): c.sendall(buf)
        else:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        c.close()
    except Exception:
        pass
def dns():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((ip, 53))
    while True:
        q, a = u.recvfrom(512); e = 12
        while q[e] != 0: e += q[e] + 1
        e += 5
        u.sendto(q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:e]
                 + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(ip), a)
threading.Thread(target=dns, daemon=True).start()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
' "$thip" "$work/srv.pem" "$work/srv.key" "$mib" & srv2=$!
sleep 0.5

mkdir -p "$work/cfg/lazaret" "$work/ws"
cat > "$work/cfg/lazaret/config.toml" <<EOF
[profiles.none.network]
mode = "none"
[profiles.fwd.network]
dns = ["$thip"]
[profiles.names.network]
dns = ["$thip"]
hosts = ["bench.test"]
[profiles.sec.network]
dns = ["$thip"]
hosts = ["bench.test"]
[profiles.sec.secrets.BENCH_KEY]
from = "file:$work/bench-key"
hosts = ["bench.test"]
EOF
echo "sk-bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > "$work/bench-key"
chown -R "$user:" "$work"
as_user() {
    setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$home" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin XDG_CONFIG_HOME="$work/cfg" "$@"
}
ms() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
cd "$work/ws"
as_user "$lz" run --quiet --profile default -- true   # warm: prepares the lower
as_user "$lz" run --quiet --profile none -- true
as_user "$lz" run --quiet --profile names -- true
# The gate verifies bench.test against the bench CA (test-only knob).
as_user env LAZARET_TEST_UPSTREAM_CA="$work/ca.pem" "$lz" run --quiet --profile sec -- true

base=$(baseline_bin bench-net.sh)
if [ -n "$base" ]; then
    as_user "$base/lazaret" run --quiet --profile default -- true
    as_user "$base/lazaret" run --quiet --profile none -- true
fi
# cold LZ PROFILE: milliseconds of one `lazaret run -- true`.
cold() { local t0 t1; t0=$(ms); as_user "$1" run --quiet --profile "$2" -- true; t1=$(ms); echo $(( (t1 - t0) / 1000000 )); }

net=(); none=(); bnet=(); bnone=(); names=()
for _ in $(seq "$rounds"); do
    net+=($(cold "$lz" default)); none+=($(cold "$lz" none)); names+=($(cold "$lz" names))
    if [ -n "$base" ]; then
        bnet+=($(cold "$base/lazaret" default)); bnone+=($(cold "$base/lazaret" none))
    fi
done
netm=$(printf '%s\n' "${net[@]}" | median)
nonem=$(printf '%s\n' "${none[@]}" | median)
namesm=$(printf '%s\n' "${names[@]}" | median)

# One client script for both sides: sends MIB MiB over one connection,
# prints MiB/s (waits for the sink's byte count, so all data arrived).
send='
import socket, sys, time
n = int(sys.argv[2]) << 20; buf = b"\0" * (1 << 20)
s = socket.socket(); s.connect((sys.argv[1], 9000))
t = time.monotonic(); left = n
while left > 0:
    left -= s.send(buf[:min(left, len(buf))])
s.shutdown(socket.SHUT_WR); got = int(s.recv(64)); dt = time.monotonic() - t
assert got == n, (got, n)
print("%.1f" % (n / dt / (1 << 20)))
'
sbx=(); hst=(); bsbx=()
for _ in $(seq 3); do
    sbx+=($(as_user "$lz" run --quiet --profile default -- python3 -c "$send" "$thip" "$mib"))
    hst+=($(/usr/bin/python3 -c "$send" "$thip" "$mib"))
    if [ -n "$base" ]; then
        bsbx+=($(as_user "$base/lazaret" run --quiet --profile default -- python3 -c "$send" "$thip" "$mib"))
    fi
done
sbxm=$(printf '%s\n' "${sbx[@]}" | median)
hstm=$(printf '%s\n' "${hst[@]}" | median)
# The floor of that path: the same sender in a plain network namespace
# (the host kernel's TCP, no gVisor, no router hop) whose only way out is
# slirp4netns, started as the supervisor starts it. What gVisor and the
# router add is the difference between this and the sandbox's row.
ip netns add "$ns-slirp"
slirp4netns --configure --mtu=65520 --disable-host-loopback --netns-type=path "/run/netns/$ns-slirp" tap0 >/dev/null 2>&1 & slirp=$!
for _ in $(seq 50); do ip -n "$ns-slirp" -4 route show default 2>/dev/null | grep -q tap0 && break; sleep 0.1; done
slp=()
for _ in $(seq 3); do
    slp+=($(ip netns exec "$ns-slirp" /usr/bin/python3 -c "$send" "$thip" "$mib"))
done
kill "$slirp" 2>/dev/null || true; slirp=
slpm=$(printf '%s\n' "${slp[@]}" | median)

# TLS download of MIB MiB (MiB/s), and N sequential HTTPS GETs on new
# connections (ms per GET), to HOST (name for SNI and the certificate) at
# ADDR (the test host's address, or the name itself to resolve it).
tls='
import socket, ssl, sys, time
ca, host, addr, what = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
addr = socket.gethostbyname(addr)  # once, as a client with a resolver cache would
if ca == "-":
    ctx = ssl.create_default_context()  # the guest bundle (the Domain CA)
else:
    open("/tmp/bench-ca.pem", "w").write(ca)
    ctx = ssl.create_default_context(cafile="/tmp/bench-ca.pem")
def get(path):
    s = ctx.wrap_socket(socket.create_connection((addr, 443)), server_hostname=host)
    s.sendall(b"GET " + path + b" HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n"); n = 0
    while True:
        d = s.recv(1 << 20)
        if not d: break
        n += len(d)
    return n
if what == "big":
    t = time.monotonic(); n = get(b"/big"); print("%.1f" % (n / (time.monotonic() - t) / (1 << 20)))
else:
    get(b"/small"); t = time.monotonic()
    for _ in range(100): get(b"/small")
    print("%.2f" % ((time.monotonic() - t) * 10))
'
ca=$(cat "$work/ca.pem")
gbig=(); fbig=(); gget=(); fget=(); bgget=(); bfget=()
for _ in $(seq 3); do
    gbig+=($(as_user "$lz" run --quiet --profile names -- python3 -c "$tls" "$ca" bench.test bench.test big))
    fbig+=($(as_user "$lz" run --quiet --profile fwd -- python3 -c "$tls" "$ca" bench.test "$thip" big))
    gget+=($(as_user "$lz" run --quiet --profile names -- python3 -c "$tls" "$ca" bench.test bench.test get))
    fget+=($(as_user "$lz" run --quiet --profile fwd -- python3 -c "$tls" "$ca" bench.test "$thip" get))
    if [ -n "$base" ]; then
        bgget+=($(as_user "$base/lazaret" run --quiet --profile names -- python3 -c "$tls" "$ca" bench.test bench.test get))
        bfget+=($(as_user "$base/lazaret" run --quiet --profile fwd -- python3 -c "$tls" "$ca" bench.test "$thip" get))
    fi
done
sbig=()
for _ in $(seq 3); do
    sbig+=($(as_user env LAZARET_TEST_UPSTREAM_CA="$work/ca.pem" "$lz" run --quiet --profile sec -- python3 -c "$tls" - bench.test bench.test big))
done
sbigm=$(printf '%s\n' "${sbig[@]}" | median)

# Server-sent events: CA HOST N; prints the max, 99th percentile and
# median delay (ms) from the server's send to the arrival inside, over N
# events (one host clock: the sandbox's realtime clock is the host's).
sse='
import socket, ssl, sys, time
ca, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if ca == "-":
    ctx = ssl.create_default_context()
else:
    open("/tmp/bench-ca.pem", "w").write(ca)
    ctx = ssl.create_default_context(cafile="/tmp/bench-ca.pem")
s = ctx.wrap_socket(socket.create_connection((host, 443)), server_hostname=host)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b"GET /sse?n=%d HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n" % (n, host.encode()))
buf = b""; d = []
while len(d) < n:
    x = s.recv(65536)
    if not x:
        break
    now = time.time_ns(); buf += x
    while b"\n\n" in buf:
        ev, buf = buf.split(b"\n\n", 1)
        for line in ev.split(b"\n"):
            if line.startswith(b"data: "):
                d.append((now - int(line[6:])) / 1e6)
assert len(d) == n, (len(d), n)
d.sort()
print("%.2f %.2f %.2f" % (d[-1], d[max(0, int(len(d) * 0.99) - 1)], d[len(d) // 2]))
'
sse_n=${BENCH_SSE_EVENTS:-600}
read -r sse_max sse_p99 sse_med < <(as_user env LAZARET_TEST_UPSTREAM_CA="$work/ca.pem" "$lz" run --quiet --profile sec -- python3 -c "$sse" - bench.test "$sse_n")
read -r ssp_max ssp_p99 ssp_med < <(as_user "$lz" run --quiet --profile names -- python3 -c "$sse" "$ca" bench.test 100)
gbigm=$(printf '%s\n' "${gbig[@]}" | median); fbigm=$(printf '%s\n' "${fbig[@]}" | median)
ggetm=$(printf '%s\n' "${gget[@]}" | median); fgetm=$(printf '%s\n' "${fget[@]}" | median)

echo "rounds: $rounds (cold start), 3 (throughput, ${mib} MiB over one connection)"
echo "cold start, lazaret run -- true, network (slirp4netns + policy + probe): median ${netm} ms"
echo "cold start, lazaret run -- true, network.mode = \"none\":                median ${nonem} ms"
awk -v a="$netm" -v b="$nonem" 'BEGIN { printf "ratio network/none: %.2fx (+%d ms)\n", a / b, a - b }'
echo "TCP sandbox -> test host: median ${sbxm} MiB/s"
echo "TCP host    -> test host: median ${hstm} MiB/s"
echo "TCP slirp4netns alone (host netns) -> test host: median ${slpm} MiB/s"
awk -v a="$sbxm" -v b="$hstm" -v c="$slpm" 'BEGIN { printf "ratio sandbox/host: %.3f; slirp4netns alone/host: %.3f (the relay floor); sandbox/slirp4netns alone: %.3f\n", a / b, c / b, a / c }'
bench_row "cold start, network (vs network.mode = none)" "$netm" "$nonem" ms "-"
bench_row "TCP sandbox -> test host (vs host)" "$sbxm" "$hstm" MiB/s ">=0.5x"
bench_row "TCP slirp4netns alone -> test host (vs host; the relay's floor)" "$slpm" "$hstm" MiB/s "-"
echo "allow-by-name (network.hosts = [\"bench.test\"]) vs forwarded, load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cold start, lazaret run -- true, allow-by-name:                        median ${namesm} ms"
awk -v a="$namesm" -v b="$netm" 'BEGIN { printf "ratio allow-by-name/default: %.3f (target <= 1.10)\n", a / b }'
echo "TLS download ${mib} MiB through the gate: median ${gbigm} MiB/s; forwarded: median ${fbigm} MiB/s"
awk -v a="$gbigm" -v b="$fbigm" 'BEGIN { printf "ratio gate/forwarded throughput: %.3f (target >= 0.9)\n", a / b }'
echo "100 sequential HTTPS GETs, ms per connection: gate median ${ggetm}, forwarded median ${fgetm}"
awk -v a="$ggetm" -v b="$fgetm" 'BEGIN { printf "connection setup through the gate: %+.2f ms (target <= +2 ms)\n", a - b }'
bench_row "cold start, allow-by-name (vs default)" "$namesm" "$netm" ms "<=1.10x"
bench_row "TLS download through the gate (vs forwarded)" "$gbigm" "$fbigm" MiB/s ">=0.9x"
bench_row "HTTPS connection through the gate (vs forwarded)" "$ggetm" "$fgetm" ms "<=+2ms"
echo "TLS download ${mib} MiB, secret bound (terminated, scanned): median ${sbigm} MiB/s"
awk -v a="$sbigm" -v b="$gbigm" 'BEGIN { printf "ratio terminated/passed-through: %.3f (target >= 0.8)\n", a / b }'
bench_row "TLS download with a secret bound (terminated vs passed through)" "$sbigm" "$gbigm" MiB/s ">=0.8x"
echo "SSE, ${sse_n} events over $((sse_n / 10)) s, secret bound (terminated): delay max ${sse_max} ms, p99 ${sse_p99} ms, median ${sse_med} ms"
echo "SSE, 100 events, passed through by name:                    delay max ${ssp_max} ms, p99 ${ssp_p99} ms, median ${ssp_med} ms"
bench_row "SSE event delay through a terminated connection (max of ${sse_n}, vs the server's send)" "$sse_max" 0 ms "<=+50ms"
if [ -n "$base" ]; then
    bnetm=$(printf '%s\n' "${bnet[@]}" | median)
    bnonem=$(printf '%s\n' "${bnone[@]}" | median)
    bsbxm=$(printf '%s\n' "${bsbx[@]}" | median)
    echo "baseline ($base):"
    echo "  cold start network: median ${bnetm} ms, none: median ${bnonem} ms"
    awk -v a="$bnetm" -v b="$bnonem" 'BEGIN { printf "  ratio network/none: %.2fx (+%d ms)\n", a / b, a - b }'
    echo "  TCP sandbox -> test host: median ${bsbxm} MiB/s"
    awk -v a="$bsbxm" -v b="$hstm" 'BEGIN { printf "  ratio sandbox/host: %.3f\n", a / b }'
    awk -v a="$netm" -v b="$bnetm" -v c="$nonem" -v d="$bnonem" -v e="$sbxm" -v f="$bsbxm" 'BEGIN {
        printf "this build / baseline: cold start with network %.3f, without %.3f; sandbox throughput %.3f\n", a / b, c / d, e / f }'
    bggetm=$(printf '%s\n' "${bgget[@]}" | median); bfgetm=$(printf '%s\n' "${bfget[@]}" | median)
    echo "  100 sequential HTTPS GETs, ms per connection: gate median ${bggetm}, forwarded median ${bfgetm}"
    bench_row "cold start, network, baseline build (vs network.mode = none)" "$bnetm" "$bnonem" ms "-"
    bench_row "cold start, network (vs the baseline build)" "$netm" "$bnetm" ms "<=1.05x"
    bench_row "TCP sandbox -> test host, baseline build (vs host)" "$bsbxm" "$hstm" MiB/s "-"
    bench_row "TCP sandbox -> test host (vs the baseline build)" "$sbxm" "$bsbxm" MiB/s ">=0.95x"
    bench_row "HTTPS connection through the gate, baseline build (vs forwarded)" "$bggetm" "$bfgetm" ms "-"
    bench_row "HTTPS connection through the gate (vs the baseline build)" "$ggetm" "$bggetm" ms "<=1.05x"
fi
