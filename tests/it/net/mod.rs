//! The network: the router's policy (`policy`, `router`), attacks around it
//! (`attacks`), egress by name (`names`, and attacks through the names
//! themselves: `name_attacks`), a flood of refusals and idle relays
//! (`flood`), keys swapped in at the gate (`secrets`) under sentinels stable across starts (`sentinels`), secret sources the
//! sandbox cannot steer (`sources`), loopback inside (`localhost`),
//! published ports (`ports`), what `net log` shows of the Domain's own
//! start-up checks (`log_checks`) and a company's TLS-intercepting proxy
//! (`proxy`).
pub mod attacks;
pub mod flood;
pub mod k8s_gate;
pub mod localhost;
pub mod log_checks;
pub mod name_attacks;
pub mod names;
pub mod policy;
pub mod ports;
pub mod proxy;
pub mod router;
pub mod secrets;
pub mod sentinels;
pub mod sources;
