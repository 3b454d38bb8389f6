//! The Client CLI process: argument parsing, the public commands and the
//! client side of a session.

pub mod cli;
pub mod doctor;
pub mod lifecycle;
pub mod prompt;
mod secrets;
pub mod usage;
