//! The Client CLI process: argument parsing and dispatch, the public
//! commands and the client side of a session.

mod answer;
mod args;
mod completion;
pub mod dispatch;
pub mod doctor;
mod export;
mod failure;
mod gate;
mod git;
mod image;
pub mod lifecycle;
mod net;
mod otherbuild;
pub mod prompt;
#[cfg(test)]
mod ps_snapshots;
mod resolve;
mod run;
mod screen;
mod secrets;
mod select;
mod session;
mod start;
mod state;
pub mod usage;
mod version;
