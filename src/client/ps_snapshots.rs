//! Snapshots of `lazaret ps` (the table and `--json`), rendered from fixed
//! values: tests/snapshots/ps-table.txt and ps-json.txt
//! (`crate::snapshot`, `LAZARET_BLESS=1` to rewrite).

use crate::client::lifecycle::{ps_table, status_json};
use crate::client::otherbuild::Foreign;
use crate::domain::{self, DomainId};
use crate::wire::client::{SessionId, SessionInfo, StatusInfo};

const NOW: i64 = 1_800_000_000;

fn domain(id: &str, profile: &str, started: i64, argv0: &[&str], ports: &[&str], escalations: u32) -> StatusInfo {
    StatusInfo {
        domain_id: DomainId::parse(id).unwrap(),
        profile: profile.into(),
        workspace: "/home/me/src/api".into(),
        generation: domain::Generation::FIRST,
        phase: "ready".into(),
        coordinator_id: "c0ffee".into(),
        coordinator_pid: 4242,
        supervisor_pid: 4243,
        runsc_pid: 4244,
        sandbox_id: "lazaret-0123".into(),
        started_at: started,
        sessions: argv0
            .iter()
            .enumerate()
            .map(|(i, a)| SessionInfo {
                session_id: SessionId::parse(&format!("{i:016x}")).unwrap(),
                client_pid: 5000 + i as i32,
                exec_pid: 6000 + i as i32,
                argv0: a.to_string(),
                tty: i == 0,
            })
            .collect(),
        pending_escalations: escalations,
        ports: ports.iter().map(|p| p.parse().unwrap()).collect(),
        egress: if ports.is_empty() { "by-name" } else { "open" }.into(),
    }
}

fn domains() -> Vec<(StatusInfo, Option<(u64, u64)>)> {
    vec![
        (
            domain(
                "3f2a9c1b4d5e6f708192",
                "default",
                NOW - 12 * 60,
                &["bash", "sleep"],
                &["127.0.0.1:18000:8000"],
                0,
            ),
            Some((1288490188, 20 << 30)),
        ),
        (
            domain("9e8d7c6b5a4f3e2d1c0b", "claude\u{1b}[2J", NOW - 3 * 86400, &[], &[], 2),
            None,
        ),
    ]
}

#[test]
fn ps_table_snapshot() {
    crate::snapshot::check("ps-table.txt", &ps_table(&domains(), NOW));
}

#[test]
fn ps_json_snapshot() {
    let foreign = [Foreign {
        domain_id: DomainId::parse("aa8d7c6b5a4f3e2d1c0b").unwrap(),
        profile: "old".into(),
        workspace: "/home/me/src/old".into(),
        build: "0.1.0 (commit 0123456789ab)".into(),
        protocol: Some(7),
        started_at: NOW - 100,
        sessions: Some(1),
        coordinator_pid: 777,
    }];
    let mut json = status_json(&domains(), &foreign, NOW);
    json.push('\n');
    crate::snapshot::check("ps-json.txt", &json);
}
