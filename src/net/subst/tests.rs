//! The secret swap on whole and cut-up HTTP/1.1 exchanges.

use std::collections::VecDeque;

use super::replace::Replacer;
use super::*;

const REAL: &str = "sk-ant-REAL-0123456789abcdef";
const OTHER_REAL: &str = "ghp_OTHERREAL987654321";

fn default_headers() -> Vec<String> {
    crate::config::secrets::DEFAULT_HEADERS
        .iter()
        .map(|h| h.to_string())
        .collect()
}

fn bindings() -> (Vec<Binding>, String, String) {
    let s1 = crate::config::secrets::sentinel().unwrap();
    let s2 = crate::config::secrets::sentinel().unwrap();
    let b = vec![
        Binding {
            var: "ANTHROPIC_API_KEY".into(),
            sentinel: s1.clone(),
            real: SecretValue::new(REAL.into()).unwrap(),
            hosts: vec!["api.test".into()],
            headers: default_headers(),
            plain_http: false,
        },
        Binding {
            var: "GH_TOKEN".into(),
            sentinel: s2.clone(),
            real: SecretValue::new(OTHER_REAL.into()).unwrap(),
            hosts: vec!["git.test".into()],
            headers: default_headers(),
            plain_http: false,
        },
    ];
    (b, s1, s2)
}

/// The request side of a connection the gate opened with verified TLS.
fn tls(host: &str, b: &[Binding]) -> RequestSide {
    RequestSide::new(host, b, Upstream::Verified)
}

/// The request side of a plain HTTP connection.
fn plain(host: &str, b: &[Binding]) -> RequestSide {
    RequestSide::new(host, b, Upstream::Plain)
}

fn send(side: &mut RequestSide, parts: &[&[u8]]) -> Result<(Vec<u8>, VecDeque<Expect>), Refusal> {
    let mut out = Vec::new();
    let mut ex = VecDeque::new();
    for p in parts {
        side.feed(p, &mut out, &mut ex)?;
    }
    Ok((out, ex))
}

fn contains(h: &[u8], n: &str) -> bool {
    h.windows(n.len()).any(|w| w == n.as_bytes())
}

#[test]
fn replacer_across_every_cut() {
    let text = b"aa PATTERN bb PATTERNPATTERN cc PATT".to_vec();
    let want = b"aa X bb XX cc PATT".to_vec();
    for cut in 0..=text.len() {
        for cut2 in cut..=text.len() {
            let mut r = Replacer::new(vec![(b"PATTERN".to_vec(), Some(b"X".to_vec()))]);
            let mut out = Vec::new();
            r.feed(&text[..cut], &mut out).unwrap();
            r.feed(&text[cut..cut2], &mut out).unwrap();
            r.feed(&text[cut2..], &mut out).unwrap();
            r.finish(&mut out);
            assert_eq!(out, want, "cuts {cut} {cut2}");
        }
    }
}

#[test]
fn replacer_holds_back_only_a_possible_match() {
    let mut r = Replacer::new(vec![(b"secretvalue".to_vec(), Some(b"S".to_vec()))]);
    let mut out = Vec::new();
    // An SSE event ends in "\n\n": nothing of it is held back.
    r.feed(b"data: hello\n\n", &mut out).unwrap();
    assert_eq!(out, b"data: hello\n\n");
    out.clear();
    r.feed(b"data: secr", &mut out).unwrap();
    assert_eq!(out, b"data: ");
    r.feed(b"etvalue!\n\n", &mut out).unwrap();
    assert_eq!(out, b"data: S!\n\n");
    let d = Replacer::new(vec![(b"sentinel".to_vec(), None)]);
    assert_eq!(d.once(b"xx sentinel yy"), Err(0));
}

#[test]
fn sentinel_becomes_real_only_in_the_headers_its_secret_names() {
    let (b, s1, _) = bindings();
    let mut side = tls("api.test", &b);
    let req = format!(
        "POST /v1/messages?key={s1} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {s1}\r\n\
         X-Api-Key: {s1}\r\nPROXY-AUTHORIZATION: {s1}\r\nX-Other: {s1}\r\nX-{s1}: 1\r\n\
         Accept-Encoding: gzip\r\nContent-Length: 55\r\n\r\n{{\"k\":\"{s1}\"}}"
    );
    // Byte by byte: every cut of the head (a sentinel split across reads).
    let parts: Vec<&[u8]> = req.as_bytes().chunks(1).collect();
    let (out, ex) = send(&mut side, &parts).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(&format!("Authorization: Bearer {REAL}\r\n")), "{text}");
    assert!(text.contains(&format!("X-Api-Key: {REAL}\r\n")), "{text}");
    assert!(text.contains(&format!("PROXY-AUTHORIZATION: {REAL}\r\n")), "{text}");
    // Never in the target, another header, a header name or the body.
    assert!(text.starts_with(&format!("POST /v1/messages?key={s1} ")), "{text}");
    assert!(text.contains(&format!("X-Other: {s1}\r\n")), "{text}");
    assert!(text.contains(&format!("X-{s1}: 1\r\n")), "{text}");
    assert!(text.ends_with(&format!("\r\n\r\n{{\"k\":\"{s1}\"}}")), "{text}");
    assert_eq!(text.matches(REAL).count(), 3, "{text}");
    assert_eq!(ex.len(), 1);

    // A secret that names its own header: swapped there only.
    let mut b2 = b.clone();
    b2[0].headers = vec!["x-goog-api-key".into()];
    let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nX-Goog-Api-Key: {s1}\r\nAuthorization: Bearer {s1}\r\n\r\n");
    let (out, _) = send(&mut tls("api.test", &b2), &[req.as_bytes()]).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(&format!("X-Goog-Api-Key: {REAL}\r\n")), "{text}");
    assert!(text.contains(&format!("Authorization: Bearer {s1}\r\n")), "{text}");
}

/// Attack: two range requests for an echo, cut in the middle of the real
/// value: each response holds half of it, which no scan matches. Towards
/// a bound host the gate asks for whole bodies only.
#[test]
fn towards_a_bound_host_no_range_is_asked_for() {
    let (b, _, _) = bindings();
    let req =
        b"GET /echo HTTP/1.1\r\nHost: api.test\r\nRange: bytes=0-40\r\nIf-Range: \"x\"\r\nrange: bytes=41-\r\n\r\n";
    let (out, _) = send(&mut tls("api.test", &b), &[req]).unwrap();
    let text = String::from_utf8(out).unwrap().to_ascii_lowercase();
    assert!(!text.contains("range"), "{text}");
    // Elsewhere (no secret bound) ranges pass.
    let req = b"GET / HTTP/1.1\r\nHost: cdn.test\r\nRange: bytes=0-40\r\n\r\n";
    let (out, _) = send(&mut tls("cdn.test", &b), &[req]).unwrap();
    assert!(contains(&out, "Range: bytes=0-40"));
}

#[test]
fn towards_a_bound_host_only_identity_is_asked_for() {
    let (b, _, _) = bindings();
    let req =
        b"GET / HTTP/1.1\r\nHost: api.test\r\nAccept-Encoding: gzip, br\r\naccept-encoding: zstd\r\nTE: gzip\r\n\r\n";
    let (out, _) = send(&mut tls("api.test", &b), &[req]).unwrap();
    let text = String::from_utf8(out).unwrap().to_ascii_lowercase();
    assert_eq!(text.matches("accept-encoding").count(), 1, "{text}");
    assert!(text.contains("accept-encoding: identity\r\n"), "{text}");
    assert!(
        !text.contains("gzip") && !text.contains("zstd") && !text.contains("\r\nte:"),
        "{text}"
    );
}

#[test]
fn plain_http_refuses_a_bound_sentinel_where_it_would_be_swapped() {
    let (b, s1, _) = bindings();
    let downgrade = Refusal::Downgrade {
        var: "ANTHROPIC_API_KEY".into(),
        host: "api.test".into(),
    };
    let basic = openssl::base64::encode_block(format!("u:{s1}").as_bytes());
    for h in [
        format!("Authorization: Bearer {s1}"),
        format!("authorization: Basic {basic}"),
        format!("X-API-KEY: {s1}"),
        format!("Proxy-Authorization: {s1}"),
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\n{h}\r\n\r\n");
        // Whole, and cut byte by byte.
        let parts: Vec<&[u8]> = req.as_bytes().chunks(1).collect();
        assert_eq!(
            send(&mut plain("api.test", &b), &[req.as_bytes()]).unwrap_err(),
            downgrade
        );
        assert_eq!(send(&mut plain("api.test", &b), &parts).unwrap_err(), downgrade);
    }
    assert!(downgrade.to_string().contains("ANTHROPIC_API_KEY") && downgrade.to_string().contains("downgrade"));
    // Where it would not be swapped, it goes as it is (worthless).
    let req = format!("POST /?k={s1} HTTP/1.1\r\nHost: api.test\r\nX-Other: {s1}\r\nContent-Length: 47\r\n\r\n{s1}");
    let (out, _) = send(&mut plain("api.test", &b), &[req.as_bytes()]).unwrap();
    assert!(!contains(&out, REAL) && contains(&out, &format!("X-Other: {s1}")));
    // A pipelined second request on the same connection is refused too.
    let req = format!(
        "GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nGET /b HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n"
    );
    let mut side = plain("api.test", &b);
    let (first, _) = send(&mut side, &[&req.as_bytes()[..35]]).unwrap();
    assert!(first.starts_with(b"GET /a "));
    assert_eq!(send(&mut side, &[&req.as_bytes()[35..]]).unwrap_err(), downgrade);
    // Unless the secret opts in.
    let mut b2 = b.clone();
    b2[0].plain_http = true;
    let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {s1}\r\n\r\n");
    let (out, _) = send(&mut plain("api.test", &b2), &[req.as_bytes()]).unwrap();
    assert!(contains(&out, &format!("Bearer {REAL}")) && !contains(&out, &s1));
    // Over verified TLS the same request is swapped.
    let (out, _) = send(&mut tls("api.test", &b), &[req.as_bytes()]).unwrap();
    assert!(contains(&out, &format!("Bearer {REAL}")));
}

#[test]
fn every_request_to_a_bound_host_names_it_once() {
    let (b, s1, _) = bindings();
    let bad: Vec<String> = vec![
        // HTTP/1.0 without Host, alone and pipelined after a good request.
        format!("GET / HTTP/1.0\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nGET /b HTTP/1.0\r\nx-api-key: {s1}\r\n\r\n"),
        // Absolute form naming the host, but no Host.
        format!("GET http://api.test/ HTTP/1.0\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET http://api.test/ HTTP/1.1\r\nHost: evil.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET https://evil.test/ HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET http://api.test@evil.test/ HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test, evil.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nhost: api.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test.evil.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost:\r\nx-api-key: {s1}\r\n\r\n"),
        // Folded (obs-fold) Host or credentials.
        format!("GET / HTTP/1.1\r\nHost: api.test\r\n evil.test\r\nx-api-key: {s1}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key:\r\n {s1}\r\n\r\n"),
    ];
    for c in &bad {
        for side in [tls("api.test", &b), plain("api.test", &b)] {
            let mut side = side;
            let mut out = Vec::new();
            let r = side.feed(c.as_bytes(), &mut out, &mut VecDeque::new());
            assert!(matches!(r, Err(Refusal::BadRequest(_))), "{c:?}: {r:?}");
            assert!(!contains(&out, REAL), "{c:?}");
        }
    }
    // Any case, a port, a trailing dot: the same host.
    for h in ["API.Test", "api.test:443", "api.test.", "api.test.:8443"] {
        let req = format!("GET / HTTP/1.1\r\nHOST: {h}\r\nx-api-key: {s1}\r\n\r\n");
        let (out, _) = send(&mut tls("api.test", &b), &[req.as_bytes()]).unwrap();
        assert!(contains(&out, REAL), "{h}");
    }
    // HTTP/1.0 with its Host is fine; towards a host with no secret, an
    // HTTP/1.0 request may still omit it.
    let req = format!("GET / HTTP/1.0\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n");
    let (out, ex) = send(&mut tls("api.test", &b), &[req.as_bytes()]).unwrap();
    assert!(contains(&out, REAL) && ex[0].http10);
    assert!(send(&mut tls("other.test", &b), &[b"GET / HTTP/1.0\r\n\r\n"]).is_ok());
}

#[test]
fn an_unbound_sentinel_anywhere_in_the_head_is_a_leak() {
    let (b, _, s2) = bindings();
    for req in [
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nX-{s2}: 1\r\n\r\n"),
        format!("GET /{s2} HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nX-Other: {s2}\r\n\r\n"),
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: {s2}\r\n\r\n"),
    ] {
        for mut side in [tls("api.test", &b), plain("api.test", &b)] {
            let r = send(&mut side, &[req.as_bytes()]);
            assert!(
                matches!(&r, Err(Refusal::Leak { var, .. }) if var == "GH_TOKEN"),
                "{req}: {r:?}"
            );
        }
    }
}

#[test]
fn basic_auth_user_or_password() {
    let (b, s1, _) = bindings();
    for cred in [format!("x:{s1}"), format!("{s1}:x-oauth-basic")] {
        let mut side = tls("api.test", &b);
        let enc = openssl::base64::encode_block(cred.as_bytes());
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic {enc}\r\n\r\n");
        let (out, _) = send(&mut side, &[req.as_bytes()]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let got = text.split("Basic ").nth(1).unwrap().split("\r\n").next().unwrap();
        let dec = String::from_utf8(openssl::base64::decode_block(got).unwrap()).unwrap();
        assert_eq!(dec, cred.replace(&s1, REAL));
        // An upstream that echoes the header hands back the gate's base64
        // (no real value as bytes): it becomes the sandbox's own again.
        let pairs = side.take_encoded();
        assert_eq!(pairs, [(got.as_bytes().to_vec(), enc.as_bytes().to_vec())]);
        assert!(side.take_encoded().is_empty());
        let mut resp = ResponseSide::new("api.test", &b);
        resp.add_encoded(pairs).unwrap();
        let body = format!("{{\"auth\":\"Basic {got}\"}}");
        let echo = format!(
            "HTTP/1.1 200 OK\r\nX-Echo: Basic {got}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let parts: Vec<&[u8]> = echo.as_bytes().chunks(3).collect();
        let out = receive(&mut resp, &mut one_get(), &parts);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains(got), "{text}");
        assert!(text.contains(&format!("X-Echo: Basic {enc}\r\n")), "{text}");
        assert_eq!(
            String::from_utf8(dechunk(text.split_once("\r\n\r\n").unwrap().1.as_bytes())).unwrap(),
            format!("{{\"auth\":\"Basic {enc}\"}}")
        );
    }
    // Bounded per connection.
    let mut resp = ResponseSide::new("api.test", &b);
    for i in 0..64 {
        resp.add_encoded(vec![(format!("enc{i:04}xx").into_bytes(), b"s".to_vec())])
            .unwrap();
    }
    assert!(resp.add_encoded(vec![(b"enc9999xx".to_vec(), b"s".to_vec())]).is_err());
    // The same one again is no new pattern.
    assert!(resp.add_encoded(vec![(b"enc0001xx".to_vec(), b"s".to_vec())]).is_ok());
}

#[test]
fn sentinel_towards_another_host_is_a_leak() {
    let (b, s1, s2) = bindings();
    // In a header, towards a host with no secret.
    let mut side = tls("other.test", &b);
    let req = format!("GET / HTTP/1.1\r\nHost: other.test\r\nx-api-key: {s1}\r\n\r\n");
    let e = send(&mut side, &[req.as_bytes()]).unwrap_err();
    assert_eq!(
        e,
        Refusal::Leak {
            var: "ANTHROPIC_API_KEY".into(),
            host: "other.test".into()
        }
    );
    // GH_TOKEN's sentinel towards api.test (bound to another secret).
    let mut side = tls("api.test", &b);
    let req = format!("GET /?t={s2} HTTP/1.1\r\nHost: api.test\r\n\r\n");
    assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { var, .. }) if var == "GH_TOKEN"));
    // Base64 inside Basic.
    let mut side = tls("other.test", &b);
    let enc = openssl::base64::encode_block(format!("u:{s1}").as_bytes());
    let req = format!("GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Basic {enc}\r\n\r\n");
    assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { .. })));
    // In a chunked body, cut across chunks and reads: refused, and the
    // piece holding the sentinel is never output.
    let mut side = tls("other.test", &b);
    let (half1, half2) = s1.split_at(20);
    let head = b"POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let c1 = format!("{:x}\r\nabc{half1}\r\n", half1.len() + 3);
    let c2 = format!("{:x}\r\n{half2}\r\n0\r\n\r\n", half2.len());
    let mut out = Vec::new();
    let mut ex = VecDeque::new();
    side.feed(&head, &mut out, &mut ex).unwrap();
    side.feed(c1.as_bytes(), &mut out, &mut ex).unwrap();
    assert!(matches!(
        side.feed(c2.as_bytes(), &mut out, &mut ex),
        Err(Refusal::Leak { .. })
    ));
    assert!(!contains(&out, &s1[..21]));
    // Content-Length body.
    let mut side = tls("other.test", &b);
    let req = format!("POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: 60\r\n\r\n{{\"k\":\"{s1}\"}}");
    assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { .. })));
}

#[test]
fn no_secret_host_without_sentinel_passes_unchanged() {
    let (b, _, _) = bindings();
    let mut side = tls("other.test", &b);
    let req = b"GET /x HTTP/1.1\r\nHost: other.test\r\nAccept-Encoding: gzip\r\n\r\n";
    let (out, _) = send(&mut side, &[req]).unwrap();
    assert_eq!(out, req);
}

#[test]
fn framing_attacks_are_refused() {
    let (b, s1, _) = bindings();
    let cases: Vec<String> = vec![
        "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".into(),
        "GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n".into(),
        "GET / HTTP/1.1\r\n\r\n".into(),
        "GET http://evil.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n".into(),
        "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
        "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n".into(),
        "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked, gzip\r\n\r\n".into(),
        "GET / HTTP/1.1\r\nHost: api.test\r\nX: a\r\n b\r\n\r\n".into(),
        "GET / HTTP/1.1\nHost: api.test\n\n".into(),
        "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test\r\n\r\n".into(),
        "GET / HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n".into(),
        "GET / HTTP/2.0\r\nHost: api.test\r\n\r\n".into(),
        format!("GET / HTTP/1.1\r\nHost: api.test\r\nX: {}\r\n", "a".repeat(MAX_HEAD)),
    ];
    for c in cases {
        let mut side = tls("api.test", &b);
        let r = send(&mut side, &[c.as_bytes()]);
        assert!(
            matches!(r, Err(Refusal::BadRequest(_))),
            "{:?}: {r:?}",
            &c[..c.len().min(90)]
        );
    }
    // A smuggled second request after a body is parsed and swapped too.
    let mut side = tls("api.test", &b);
    let req = format!(
        "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
         GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n"
    );
    let (out, ex) = send(&mut side, &[req.as_bytes()]).unwrap();
    assert_eq!(ex.len(), 2);
    assert!(contains(&out, &format!("x-api-key: {REAL}")) && !contains(&out, &s1));
    assert!(contains(&out, "3\r\nabc\r\n0\r\n\r\n"));
    // Trailers never reach the server.
    let mut side = tls("api.test", &b);
    let req = "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\nGET /smuggled HTTP/1.1\r\n\r\n";
    let (out, ex) = send(&mut side, &[req.as_bytes()]).unwrap();
    assert!(out.ends_with(b"1\r\na\r\n0\r\n\r\n") && !contains(&out, "X-T") && !contains(&out, "smuggled"));
    assert_eq!(ex.len(), 1);
}

fn receive(side: &mut ResponseSide, ex: &mut VecDeque<Expect>, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        side.feed(p, &mut out, ex).unwrap();
    }
    side.finish(&mut out);
    out
}

/// Decodes a chunked body (test oracle).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap(), 16).unwrap();
        b = &b[nl + 2..];
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
}

#[test]
fn real_value_in_response_becomes_sentinel() {
    let (b, s1, s2) = bindings();
    let body = format!("{{\"echo\":\"{REAL}\",\"other\":\"{OTHER_REAL}\"}}");
    let resp = format!(
        "HTTP/1.1 200 OK\r\nX-Echo: Bearer {REAL}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for step in [1, 7, resp.len()] {
        let mut side = ResponseSide::new("api.test", &b);
        let mut ex = VecDeque::from([Expect {
            head: false,
            http10: false,
        }]);
        let parts: Vec<&[u8]> = resp.as_bytes().chunks(step).collect();
        let out = receive(&mut side, &mut ex, &parts);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(!text.contains(REAL) && !text.contains(OTHER_REAL), "{text}");
        assert!(text.contains(&format!("X-Echo: Bearer {s1}\r\n")), "{text}");
        assert!(
            text.contains("Transfer-Encoding: chunked") && !text.contains("Content-Length"),
            "{text}"
        );
        let (_, rest) = text.split_once("\r\n\r\n").unwrap();
        let decoded = String::from_utf8(dechunk(rest.as_bytes())).unwrap();
        assert_eq!(decoded, body.replace(REAL, &s1).replace(OTHER_REAL, &s2));
        assert!(ex.is_empty());
    }
}

#[test]
fn chunked_and_sse_stream_without_holding_events() {
    let (b, s1, _) = bindings();
    let mut side = ResponseSide::new("api.test", &b);
    let mut ex = VecDeque::from([Expect {
        head: false,
        http10: false,
    }]);
    let mut out = Vec::new();
    side.feed(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        &mut out,
        &mut ex,
    )
    .unwrap();
    out.clear();
    // Each event is out as soon as its chunk is in.
    for i in 0..3 {
        let ev = format!("data: event {i}\n\n");
        side.feed(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes(), &mut out, &mut ex)
            .unwrap();
        assert!(contains(&out, &ev), "event {i} held back");
        out.clear();
    }
    // A real value cut across two chunks.
    let (a, z) = REAL.split_at(10);
    side.feed(
        format!("{:x}\r\ndata: {a}\r\n", a.len() + 6).as_bytes(),
        &mut out,
        &mut ex,
    )
    .unwrap();
    side.feed(
        format!("{:x}\r\n{z}\n\n\r\n0\r\n\r\n", z.len() + 2).as_bytes(),
        &mut out,
        &mut ex,
    )
    .unwrap();
    let text = String::from_utf8(dechunk(&out)).unwrap();
    assert_eq!(text, format!("data: {s1}\n\n"));
    assert!(out.ends_with(b"0\r\n\r\n"));
}

#[test]
fn head_informational_and_http10_responses() {
    let (b, s1, _) = bindings();
    let mut side = ResponseSide::new("api.test", &b);
    let mut ex = VecDeque::from([
        Expect {
            head: true,
            http10: false,
        },
        Expect {
            head: false,
            http10: false,
        },
    ]);
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n\
         HTTP/1.1 204 No Content\r\nX-K: {REAL}\r\n\r\n"
    );
    let out = receive(&mut side, &mut ex, &[resp.as_bytes()]);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("Content-Length: 99") && text.contains("100 Continue"),
        "{text}"
    );
    assert!(text.contains(&format!("X-K: {s1}")), "{text}");
    assert!(ex.is_empty());

    let mut side = ResponseSide::new("api.test", &b);
    let mut ex = VecDeque::from([Expect {
        head: false,
        http10: true,
    }]);
    let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{REAL}", REAL.len());
    let out = receive(&mut side, &mut ex, &[resp.as_bytes()]);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("Connection: close") && text.ends_with(&s1), "{text}");
    assert!(side.closing());
    // A close-delimited body, value cut at the very end.
    let mut side = ResponseSide::new("api.test", &b);
    let mut ex = VecDeque::from([Expect {
        head: false,
        http10: false,
    }]);
    let out = receive(
        &mut side,
        &mut ex,
        &[b"HTTP/1.1 200 OK\r\n\r\nabc ", &REAL.as_bytes()[..5]],
    );
    assert!(out.ends_with(&REAL.as_bytes()[..5]));
    let mut ex = VecDeque::new();
    let mut side = ResponseSide::new("api.test", &b);
    assert!(side.feed(b"HTTP/1.1 200 OK\r\n\r\n", &mut Vec::new(), &mut ex).is_err());
}

fn one_get() -> VecDeque<Expect> {
    VecDeque::from([Expect {
        head: false,
        http10: false,
    }])
}

#[test]
fn real_value_in_a_header_name_becomes_sentinel() {
    let (b, s1, s2) = bindings();
    let resp = format!(
        "HTTP/1.1 200 {REAL}\r\nX-{REAL}: 1\r\n{OTHER_REAL}: 2\r\nX-Echo-{REAL}-{REAL}: {REAL}\r\nContent-Length: 0\r\n\r\n"
    );
    for step in [1, 5, resp.len()] {
        let mut side = ResponseSide::new("api.test", &b);
        let parts: Vec<&[u8]> = resp.as_bytes().chunks(step).collect();
        let out = receive(&mut side, &mut one_get(), &parts);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains(REAL) && !text.contains(OTHER_REAL), "{text}");
        assert!(text.starts_with(&format!("HTTP/1.1 200 {s1}\r\n")), "{text}");
        assert!(text.contains(&format!("\r\nX-{s1}: 1\r\n")), "{text}");
        assert!(text.contains(&format!("\r\n{s2}: 2\r\n")), "{text}");
        assert!(text.contains(&format!("\r\nX-Echo-{s1}-{s1}: {s1}\r\n")), "{text}");
        // Still a head a client parses: names stay tokens.
        let (h, used) = super::head::parse_head(text.as_bytes(), false).unwrap().unwrap();
        assert_eq!(used, text.len());
        assert_eq!(h.fields.len(), 4);
    }
}

#[test]
fn codings_the_scan_cannot_read_are_refused_from_a_bound_host() {
    let (b, _, _) = bindings();
    let body = format!("\x1f\x0b{REAL}");
    for field in [
        "Content-Encoding: gzip",
        "content-encoding: GZIP",
        "Content-Encoding: identity, gzip",
        "Content-Encoding: identity\r\nContent-Encoding: br",
        "Content-Encoding: deflate",
        "Content-Encoding: x-anything",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, chunked",
    ] {
        let resp = format!(
            "HTTP/1.1 200 OK\r\n{field}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let resp = if field.starts_with("Transfer") {
            format!(
                "HTTP/1.1 200 OK\r\n{field}\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
        } else {
            resp
        };
        let mut side = ResponseSide::new("api.test", &b);
        let mut out = Vec::new();
        let r = side.feed(resp.as_bytes(), &mut out, &mut one_get());
        assert!(matches!(r, Err(Refusal::BadResponse(_))), "{field}: {r:?}");
        assert!(out.is_empty() && !side.in_body(), "{field}");
    }
    // Identity in any case, or an empty list, passes.
    for field in [
        "Content-Encoding: identity",
        "Content-Encoding: IDENTITY",
        "Content-Encoding: ,",
    ] {
        let resp = format!("HTTP/1.1 200 OK\r\n{field}\r\nContent-Length: 3\r\n\r\nabc");
        let out = receive(
            &mut ResponseSide::new("api.test", &b),
            &mut one_get(),
            &[resp.as_bytes()],
        );
        assert!(contains(&out, "abc"), "{field}");
    }
    // From a host with no secret (plain HTTP through the engine), codings
    // pass: it never had a value to echo.
    let resp = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc";
    let out = receive(
        &mut ResponseSide::new("other.test", &b),
        &mut one_get(),
        &[resp.as_bytes()],
    );
    assert!(contains(&out, "gzip"));
    // A framing error mid-body: part of a response went out.
    let mut side = ResponseSide::new("api.test", &b);
    let resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX";
    assert!(side.feed(resp.as_bytes(), &mut Vec::new(), &mut one_get()).is_err());
    assert!(side.in_body());
}

/// Attack: an echoing bound host puts the value where a scan might not
/// look: the reason phrase, an early-hints (103) head, a chunk extension,
/// a trailer, a chunk boundary in the middle of it, a header line cut
/// across reads. None of it reaches the sandbox as the value.
#[test]
fn the_value_in_odd_places_of_a_response_never_comes_back() {
    let (b, s1, _) = bindings();
    let (h1, h2) = REAL.split_at(9);
    let resp = format!(
        "HTTP/1.1 103 {REAL}\r\nLink: </{REAL}>\r\n\r\n\
         HTTP/1.1 200 {REAL}\r\nX-A: {h1}{h2}\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x};e={REAL}\r\n{h1}\r\n{:x}\r\n{h2}\r\n0\r\nX-T: {REAL}\r\n\r\n",
        h1.len(),
        h2.len()
    );
    for step in [1, 3, 10, resp.len()] {
        let mut side = ResponseSide::new("api.test", &b);
        let mut ex = one_get();
        let parts: Vec<&[u8]> = resp.as_bytes().chunks(step).collect();
        let out = receive(&mut side, &mut ex, &parts);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(!text.contains(REAL), "{step}: {text}");
        assert!(
            text.contains(&format!("HTTP/1.1 103 {s1}\r\n")) && text.contains(&format!("HTTP/1.1 200 {s1}\r\n")),
            "{step}: {text}"
        );
        let body = text.split_once(&format!("200 {s1}\r\n")).unwrap().1;
        let body = body.split_once("\r\n\r\n").unwrap().1;
        assert_eq!(String::from_utf8(dechunk(body.as_bytes())).unwrap(), s1, "{step}");
        assert!(!text.contains("X-T"), "a trailer was forwarded: {text}");
    }
}

/// Attack: two secrets, one value the start of the other (a key and a
/// longer one derived from it). An echo of the longer one must come back
/// whole as its sentinel, in whatever order the secrets are listed and
/// wherever the reads cut it; before, the shorter one matched first and
/// the longer one's tail went out as it is.
#[test]
fn a_value_that_begins_with_another_is_replaced_whole() {
    let mk = |var: &str, real: &str, host: &str| Binding {
        var: var.into(),
        sentinel: crate::config::secrets::sentinel().unwrap(),
        real: SecretValue::new(real.into()).unwrap(),
        hosts: vec![host.into()],
        headers: default_headers(),
        plain_http: false,
    };
    let (short, long) = ("sk-live-1234", "sk-live-1234-extra-tail");
    let a = mk("A", short, "a.test");
    let b = mk("B", long, "b.test");
    for list in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let body = format!("{long} {short} {long}");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nX: {long}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for step in 1..=resp.len() {
            let mut side = ResponseSide::new("b.test", &list);
            let mut ex = one_get();
            let parts: Vec<&[u8]> = resp.as_bytes().chunks(step).collect();
            let out = receive(&mut side, &mut ex, &parts);
            let text = String::from_utf8_lossy(&out).into_owned();
            assert!(!text.contains("extra-tail") && !text.contains(short), "{step}: {text}");
            assert!(text.contains(&format!("X: {}\r\n", b.sentinel)), "{step}: {text}");
            let body = text.split_once("\r\n\r\n").unwrap().1;
            let want = format!("{} {} {}", b.sentinel, a.sentinel, b.sentinel);
            assert_eq!(String::from_utf8(dechunk(body.as_bytes())).unwrap(), want, "{step}");
        }
    }
    // A shorter value complete at the very end of a close-delimited body.
    let mut side = ResponseSide::new("b.test", &[a.clone(), b.clone()]);
    let mut ex = one_get();
    let out = receive(
        &mut side,
        &mut ex,
        &[b"HTTP/1.1 200 OK\r\n\r\nx ", short.as_bytes(), b"-ext"],
    );
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.ends_with(&format!("x {}-ext", a.sentinel)), "{text}");
}

/// Variants the downgrade rule must also catch on plain HTTP: the named
/// header twice (the sentinel in the second), `Basic` with no padding or a
/// tab after the scheme, and a bound sentinel in a chunked request's
/// trailer (never forwarded). None may put the real value on the wire.
#[test]
fn plain_http_downgrade_variants_never_carry_the_real_value() {
    let (b, s1, _) = bindings();
    let unpadded = openssl::base64::encode_block(format!("u:{s1}x").as_bytes());
    let unpadded = unpadded.trim_end_matches('=').to_string();
    for h in [
        format!("Authorization: Bearer none\r\nAuthorization: Bearer {s1}"),
        format!("Authorization: Basic {unpadded}"),
        format!(
            "Authorization: basic\t{}",
            openssl::base64::encode_block(format!("u:{s1}").as_bytes())
        ),
        format!("x-api-key: a{s1}b"),
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\n{h}\r\n\r\n");
        match send(&mut plain("api.test", &b), &[req.as_bytes()]) {
            Ok((out, _)) => assert!(!contains(&out, REAL), "{h}: {}", String::from_utf8_lossy(&out)),
            Err(r) => assert!(
                matches!(r, Refusal::Downgrade { .. } | Refusal::BadRequest(_)),
                "{h}: {r:?}"
            ),
        }
    }
    let req = format!(
        "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nAuthorization: Bearer {s1}\r\n\r\n"
    );
    if let Ok((out, _)) = send(&mut plain("api.test", &b), &[req.as_bytes()]) {
        assert!(
            !contains(&out, REAL) && !contains(&out, &s1),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}
