//! Agents: the lifecycle commands agents' users script (`ps`, `stop`, `rm`,
//! `exec`), profiles with a guest user, recipes that put tools in the
//! image, and real agents installed as docs/agents.md says.
pub mod documented;
pub mod image_export;
pub mod image_work;
pub mod lifecycle;
pub mod profiles;
pub mod real;
pub mod recipes;
pub mod upgrade;
