//! The argument checks every public command shares: no argument left
//! over, a UTF-8 command line, never as host root.

use crate::client::failure::Failure;
use crate::sys;

pub(crate) fn finish_args(args: pico_args::Arguments) -> Result<(), Failure> {
    let rest = args.finish();
    if let Some(a) = rest.first() {
        return Err(Failure::UnknownArgument(a.to_string_lossy().into_owned()));
    }
    Ok(())
}

/// The command after `--` as strings; an argument that is not UTF-8 is
/// bad input.
pub(crate) fn utf8_argv(cmd: Vec<std::ffi::OsString>) -> Result<Vec<String>, Failure> {
    cmd.into_iter()
        .map(|a| a.into_string().map_err(Failure::NotUtf8))
        .collect()
}

/// Lazaret never runs a sandbox as host root.
pub(crate) fn refuse_root() -> Result<(), Failure> {
    if sys::geteuid() == 0 || sys::getuid() == 0 {
        return Err(Failure::AsRoot);
    }
    Ok(())
}
