//! Git: Git inside the sandbox and the Git Sentry (`sentry`), repository
//! shapes the sandbox makes (`shapes`), and what host Git would execute
//! (`host_execution`).
pub mod host_execution;
pub mod sentry;
pub mod shapes;
