//! Integration tests: the real stack (runsc, namespaces, umoci), with the
//! CLI run as an unprivileged user. One test binary; modules per area.
//!
//! Needs: root (to switch to the test user), the user named by
//! `LAZARET_TEST_USER` with subordinate ids, binaries in `LAZARET_TEST_BIN`
//! readable by that user, and the default image built for that user —
//! `scripts/test.sh` arranges all of it. A test that cannot run prints
//! `skipping: <why>`; with `LAZARET_MUST_WORK=1` it fails instead.

mod fixtures;
mod harness;

mod agent;
mod agent_v2;
mod attack_net;
mod attack_view;
mod bounds;
mod escalation;
mod escalation_v2;
mod escalation_v3;
mod faults;
mod first_minutes;
mod foundation;
mod git;
mod git_v2;
mod hostexec;
mod hostwatch;
mod leftovers;
mod limits;
mod localhost;
mod net;
mod net_names;
mod net_v2;
mod ports;
mod real_agents;
mod recipes;
mod secrets;
mod sessions;
mod state;
mod tty;
mod view_disk;
mod view_v2;
