//! What a Domain keeps on disk: the durable store, the State Anchor and its
//! uppers, images and prepared lowers, their housekeeping, host paths, and
//! disk/cgroup accounting.

pub mod anchor;
pub mod cgroup;
pub mod gc;
pub mod image;
pub mod imagegc;
pub mod layercheck;
pub mod nospace;
pub mod paths;
pub mod progress;
pub mod sentinel_key;
pub mod state;
pub mod statefs;
pub mod store;
