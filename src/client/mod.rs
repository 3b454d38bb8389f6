//! The Client CLI process: argument parsing, the public commands and the
//! client side of a session.

pub mod cli;
pub mod doctor;
pub mod lifecycle;
mod secrets;
pub mod usage;
