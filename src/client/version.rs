//! `lazaret version [--json]`: the build's version, commit and protocol
//! versions, and the runsc Lazaret would run.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::build_info;
use crate::client::args::finish_args;
use crate::client::failure::Failure;
use crate::plan::Json;

/// The runsc on the helper `PATH` and the first line of its `--version`.
fn runsc() -> Option<(PathBuf, Option<String>)> {
    let path = crate::sys::hostenv::find("runsc")?;
    let out = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok();
    let line = out.and_then(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .map(|l| l.trim().to_string())
    });
    Some((path, line))
}

/// The `--json` text (pure).
pub fn json(runsc: Option<&(PathBuf, Option<String>)>) -> String {
    let opt = |v: Option<&str>| v.map_or(Json::Null, Json::s);
    Json::Obj(vec![
        ("version", Json::s(build_info::VERSION)),
        ("commit", opt(build_info::commit())),
        ("protocol", Json::Num(build_info::protocol() as i64)),
        ("basic_protocol", Json::Num(crate::wire::basic::BASIC_VERSION as i64)),
        ("fault_injection", Json::Bool(cfg!(feature = "fault-injection"))),
        ("runsc_found", Json::Bool(runsc.is_some())),
        (
            "runsc_path",
            opt(runsc.map(|r| r.0.to_string_lossy().into_owned()).as_deref()),
        ),
        ("runsc_version", opt(runsc.and_then(|r| r.1.as_deref()))),
    ])
    .render()
}

pub fn cmd(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let as_json = args.contains("--json");
    finish_args(args)?;
    let r = runsc();
    if as_json {
        println!("{}", json(r.as_ref()));
        return Ok(0);
    }
    println!("lazaret {}", build_info::describe());
    println!(
        "protocol {} (basic {})",
        build_info::protocol(),
        crate::wire::basic::BASIC_VERSION
    );
    match &r {
        Some((p, v)) => println!(
            "runsc: {} ({})",
            p.display(),
            v.as_deref().unwrap_or("its --version printed nothing")
        ),
        None => println!("runsc: not found on PATH (see `lazaret doctor`)"),
    }
    if cfg!(feature = "fault-injection") {
        println!("built with fault-injection (LAZARET_FAULT): for tests only");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_version_protocol_and_runsc() {
        let j = json(Some(&(
            PathBuf::from("/usr/bin/runsc"),
            Some("runsc version 0.0~20240729.0".into()),
        )));
        assert!(
            j.starts_with(&format!("{{\"version\":\"{}\"", build_info::VERSION)),
            "{j}"
        );
        assert!(j.contains(&format!("\"protocol\":{}", build_info::protocol())), "{j}");
        assert!(j.contains("\"runsc_found\":true"), "{j}");
        assert!(j.contains("\"runsc_path\":\"/usr/bin/runsc\""), "{j}");
        assert!(j.contains("\"runsc_version\":\"runsc version 0.0~20240729.0\""), "{j}");
        let none = json(None);
        assert!(
            none.contains("\"runsc_found\":false") && none.contains("\"runsc_path\":null"),
            "{none}"
        );
    }
}
