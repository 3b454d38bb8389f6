//! Git: Git inside the sandbox and the Git Sentry (`sentry`), repository
//! shapes the sandbox makes (`shapes`), and what host Git would execute
//! (`host_execution`), hooks that find their scripts by expansion, nested
//! repositories behind many entries and hooks that run project code
//! (`hooks_idioms`), and Git on an index the host wrote (`host_index`).
pub mod hooks_idioms;
pub mod host_execution;
pub mod host_index;
pub mod sentry;
pub mod shapes;
