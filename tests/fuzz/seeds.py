#!/usr/bin/env python3
# The seeds of tests/fuzz/corpus that are made, not copied: run it from
# anywhere, then commit what changed (docs/fuzzing.md).
import ssl, struct, os, hashlib
# Writes the name, dns, http and swap seeds (mailbox: src/fuzzing.rs's test;
# toml and config: the TOML blocks of docs/ and tests/fixtures).
C = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
def w(t, name, data):
    if isinstance(data, str): data = data.encode()
    open(f'{C}/{t}/{name}', 'wb').write(data)

def hello(sni, alpn=None, tls13=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if alpn: ctx.set_alpn_protocols(alpn)
    if not tls13: ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(i, o, server_hostname=sni)
    try: s.do_handshake()
    except ssl.SSLWantReadError: pass
    return o.read()

# name: TLS ClientHellos, HTTP heads, CONNECT
w('name', 'tls-sni-wildcard', hello('api.allowed.test', ['h2', 'http/1.1']))
w('name', 'tls-sni-exact-tls12', hello('exact.test', tls13=False))
w('name', 'tls-sni-unlisted', hello('evil.test'))
w('name', 'tls-sni-upper', hello('API.Allowed.TEST'))
w('name', 'http-host', 'GET / HTTP/1.1\r\nHost: a.allowed.test\r\nUser-Agent: x\r\n\r\n')
w('name', 'http-host-port', 'POST /x HTTP/1.1\r\nhost: exact.test:8443\r\nContent-Length: 0\r\n\r\n')
w('name', 'http-absolute', 'GET http://b.allowed.test:80/path HTTP/1.1\r\nHost: b.allowed.test\r\n\r\n')
w('name', 'http-absolute-exact', 'GET http://exact.test:8443/ HTTP/1.0\r\n\r\n')
w('name', 'connect', 'CONNECT c.allowed.test:443 HTTP/1.1\r\nHost: c.allowed.test:443\r\n\r\n')
w('name', 'connect-exact', 'CONNECT exact.test:8443 HTTP/1.1\r\n\r\n')
w('name', 'connect-address', 'CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n')
w('name', 'http-partial', 'GET / HTTP/1.1\r\nHost: a.allowed')
w('name', 'http-trailing-dot', 'HEAD / HTTP/1.1\r\nHost: a.allowed.test.\r\n\r\n')

# dns: queries (with EDNS OPT), answers with compression
def qname(n):
    return b''.join(bytes([len(l)]) + l.encode() for l in n.split('.') if l) + b'\0'
def query(id, n, qt=1, rd=True, edns=False):
    q = struct.pack('>HHHHHH', id, 0x0100 if rd else 0, 1, 0, 0, 1 if edns else 0) + qname(n) + struct.pack('>HH', qt, 1)
    if edns: q += b'\0' + struct.pack('>HHIH', 41, 1232, 0, 0)
    return q
def answer(id, n, addrs, cname=None):
    an = len(addrs) + (1 if cname else 0)
    m = struct.pack('>HHHHHH', id, 0x8180, 1, an, 0, 0) + qname(n) + struct.pack('>HH', 1, 1)
    ptr = b'\xc0\x0c'
    if cname:
        cn = qname(cname)
        m += ptr + struct.pack('>HHIH', 5, 1, 300, len(cn)) + cn
        ptr = struct.pack('>H', 0xc000 | (12 + len(qname(n)) + 4 + 12))
    for a in addrs:
        m += ptr + struct.pack('>HHIH', 1, 1, 60, 4) + bytes(a)
    return m
w('dns', 'query-a', query(0x1234, 'api.allowed.test'))
w('dns', 'query-aaaa-edns', query(0xbeef, 'exact.test', qt=28, edns=True))
w('dns', 'query-norecurse', query(7, 'a.b.c.allowed.test', rd=False))
w('dns', 'query-root', query(9, ''))
w('dns', 'answer-a', answer(0x1234, 'api.allowed.test', [[93,184,216,34]]))
w('dns', 'answer-two-a', answer(0x4321, 'exact.test', [[1,2,3,4],[5,6,7,8]]))
w('dns', 'answer-cname-compressed', answer(0x5555, 'www.allowed.test', [[9,9,9,9]], cname='cdn.allowed.test'))
w('dns', 'answer-nxdomain', struct.pack('>HHHHHH', 0x77, 0x8183, 1, 0, 0, 0) + qname('nope.test') + struct.pack('>HH', 1, 1))

# http: flag byte, 2 cut bytes, then request (or response) bytes
def cut(n): return struct.pack('>H', n)
reqs = {
 'get': 'GET / HTTP/1.1\r\nHost: a.test\r\n\r\n',
 'post-length': 'POST /v1 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello',
 'post-chunked': 'POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n',
 'pipelined': 'GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: A.TEST:443\r\n\r\nGET /3 HTTP/1.0\r\n\r\n',
 'absolute': 'GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nAuthorization: Basic dXNlcjpwYXNz\r\n\r\n',
}
resps = {
 'resp-length': 'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\nhello world',
 'resp-chunked': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n',
 'resp-continue': 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n',
 'resp-close': 'HTTP/1.0 200 OK\r\n\r\nbody until close',
 'resp-sse': 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nc\r\ndata: hi\n\n\r\n',
}
for k, v in reqs.items():
    w('http', k, b'\x00' + cut(len(v)//2) + v.encode())
for i, (k, v) in enumerate(resps.items()):
    w('http', k, bytes([[0, 2, 1, 0, 0][i]]) + cut(len(v)//3) + v.encode())

SA = 'lzr-sk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'
SB = 'lzr-sk-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'
RA, RB = 'sk-real-api-0123456789', 'ghp_realgit9876543210'
import base64
sreq = {
 # host index byte, cut, request
 'bound-header': (0, f'POST /v1/messages HTTP/1.1\r\nHost: api.test\r\nx-api-key: {SA}\r\nAuthorization: Bearer {SA}\r\nAccept-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{{}}'),
 'bound-target': (0, f'GET /v1?key={SA} HTTP/1.1\r\nHost: api.test\r\n\r\n'),
 'basic': (1, f'GET /repo.git/info/refs HTTP/1.1\r\nHost: git.test\r\nAuthorization: Basic {base64.b64encode(("x:"+SB).encode()).decode()}\r\n\r\n'),
 'leak-header': (1, f'GET / HTTP/1.1\r\nHost: git.test\r\nx-api-key: {SA}\r\n\r\n'),
 'leak-chunked-body': (2, f'POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n{SB[:20]}\r\n{len(SB)-20:x}\r\n{SB[20:]}\r\n0\r\n\r\n'),
 'leak-length-body': (0, f'POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: {len(SB)+4}\r\n\r\nk={SB}&x=1'),
 'pipelined-http10': (0, f'GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {SA}\r\n\r\nGET / HTTP/1.0\r\nx-api-key: {SA}\r\n\r\n'),
 'other-host': (2, f'GET / HTTP/1.1\r\nHost: other.test\r\nx: {SA[:30]}\r\n\r\n'),
}
for k, (h, v) in sreq.items():
    w('swap_request', k, bytes([h]) + cut(len(v)//2) + v.encode())
sresp = {
 'echo-header': (0, f'HTTP/1.1 200 OK\r\nX-Echo: {RA}\r\nContent-Length: {len(RB)}\r\n\r\n{RB}'),
 'echo-chunked': (0, f'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{RA[:8]}\r\n{len(RA)-8:x}\r\n{RA[8:]}\r\n0\r\n\r\n'),
 'echo-reason': (0, f'HTTP/1.1 401 {RB}\r\nContent-Length: 0\r\n\r\n'),
 'echo-close-http10': (2, f'HTTP/1.0 200 OK\r\n\r\nkey={RA} and {RB}'),
 'echo-head': (1, f'HTTP/1.1 200 OK\r\nContent-Length: 30\r\nETag: "{RA}"\r\n\r\n'),
 'echo-continue': (0, f'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: {len(RA)}\r\n\r\n{RA}'),
}
for k, (f, v) in sresp.items():
    w('swap_response', k, bytes([f]) + cut(len(v)//2) + v.encode())

# The upstream answers the dns target reads are for the name it asked, a.test.
w('dns', 'answer-asked-a', answer(0x2468, 'a.test', [[10,0,0,7]]))
w('dns', 'answer-asked-cname', answer(0x1357, 'a.test', [[10,0,0,8],[10,0,0,9]], cname='b.a.test'))
w('dns', 'answer-asked-other-name', answer(0x1111, 'b.test', [[10,0,0,10]]))
# The high bit of the first byte: a plain-HTTP upstream.
for k in ('bound-header', 'basic', 'bound-target'):
    h, v = sreq[k]
    w('swap_request', 'plain-' + k, bytes([h | 0x80]) + cut(len(v)//2) + v.encode())
v = f'GET / HTTP/1.1\r\nHost: api.test\r\nx-other: {SA}\r\nCookie: k={SA}\r\n\r\n'
w('swap_request', 'unnamed-header', b'\x00' + cut(len(v)//2) + v.encode())

# client_frames: the socket's port-forward fields (AddPort, PortTaken, a
# status's ports), each in the one spelling the codec reads.
def s32(b): return struct.pack('<I', len(b)) + b
w('client_frames', 'add-port', b'\x0b' + s32(b'127.0.0.1:0:3000'))
w('client_frames', 'port-taken', b'\x0b' + s32(b'127.0.0.1:18000:8000') + b'\x01' + s32(b'0123456789abcdef0123'))
w('client_frames', 'status-ports', bytes.fromhex(
    '061400000030313233343536373839616263646566303132330700000064656661756c74020000002f77030000000000000005000000'
    '72656164790100000063010000000200000003000000100000006c7a2d30313233343536372d38396162010000001000000066656463'
    '626139383736353433323130050000000600000004000000626173680100f15365000000000200000002000000140000003132372e30'
    '2e302e313a31383030303a38303030100000003132372e302e302e313a303a33303030'))
