//! Exports of a profile for other runtimes: `lazaret export kubernetes`
//! (docs/kubernetes.md). Pure: `kube::plan` turns the parsed profile into
//! Kubernetes objects (`doc::Value` trees), `doc` writes them as YAML or
//! JSON, `gateconf` is the sidecar egress gate's configuration (written
//! here, read by `lazaret gate --config`).

pub mod doc;
pub mod gateconf;
pub mod kube;
#[cfg(test)]
mod tests;
