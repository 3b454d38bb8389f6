//! Limits: resource caps (`caps`), bounded inputs (`bounds`), and nothing
//! left behind that bricks a Domain (`leftovers`).
pub mod bounds;
pub mod caps;
pub mod leftovers;
