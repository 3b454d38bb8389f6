//! The network: the router's policy (`policy`, `router`), attacks around it
//! (`attacks`), egress by name (`names`), a flood of refusals and idle
//! relays (`flood`), keys swapped in at the gate (`secrets`), loopback
//! inside (`localhost`) and published ports (`ports`).
pub mod attacks;
pub mod flood;
pub mod localhost;
pub mod names;
pub mod policy;
pub mod ports;
pub mod router;
pub mod secrets;
