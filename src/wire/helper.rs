//! The state helper (`lazaret:[state-helper]`) and the process that runs
//! it (`statefs::run_helper`): [`HelperMsg`] on the helper's stdout,
//! [`HelperCmd`] on its stdin. Order: `Userns` (or `NoUserns`), then
//! `Mapped` from the parent, then the report (`Entry`, `Finding`, `Size`,
//! `Removed`) and EOF; `Failed` at any point ends it. The operations
//! travel with `Mapped`.

use std::io::Read;

use super::{dec_opt_u32, enc_opt_u32, Message, ReadError, UnexpectedMessage};
use crate::wire::codec::{Dec, DecodeError, Enc, FrameReader};
use crate::wire::plan::Driver;

// The report's vocabulary (`storage::statefs` re-exports it and adds the
// helper's behaviour); here so that this edge depends on nothing above it.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    Opaque,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub kind: Kind,
    /// `file`, `dir`, `symlink`, `fifo`, `socket`, `whiteout`, `other`.
    pub ftype: String,
    pub mode: u32,
    /// Guest ids; `None` for an owner outside the user's ranges.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: u64,
    /// Path below the persistent path (`local/bin/tool`).
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub key: String,
    /// `error` or `warning`.
    pub level: String,
    pub path: String,
    pub message: String,
}

/// One operation for the helper. Names are relative to `DOMAIN_ROOT/anchor`
/// (or to the Domain Root for `Size` of `ignored`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Walk `KEY/upper` against the lower at the key's guest path.
    Walk { key: String, driver: Driver },
    /// Total size of `anchor/NAME` (or of the Domain Root's `NAME` when
    /// `in_root`).
    Size { name: String, in_root: bool },
    /// Delete `anchor/NAME`, a `.trash-*` tree.
    Remove { name: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelperMsg {
    /// The helper's user namespace exists: map it.
    Userns,
    /// `unshare(CLONE_NEWUSER)` failed.
    NoUserns,
    /// One changed entry of an upper.
    Entry(Entry),
    /// Something wrong in an upper.
    Finding(Finding),
    /// Per key (or trash name): entries and bytes.
    Size { key: String, entries: u64, bytes: u64 },
    /// A trash tree removed (`error: None`) or not.
    Removed { name: String, error: Option<String> },
    /// The helper stopped with this sentence.
    Failed { message: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelperCmd {
    /// The id maps are written: become root of the namespace and carry
    /// out `ops` in order.
    Mapped { ops: Vec<Op> },
}

fn kind_byte(k: Kind) -> u8 {
    match k {
        Kind::Added => 1,
        Kind::Modified => 2,
        Kind::Deleted => 3,
        Kind::Opaque => 4,
    }
}

fn opt_str(e: &mut Enc, v: &Option<String>) {
    match v {
        Some(s) => e.u8(1).str(s),
        None => e.u8(0),
    };
}

impl Message for HelperMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            HelperMsg::Userns => Enc::new(1).finish(),
            HelperMsg::NoUserns => Enc::new(2).finish(),
            HelperMsg::Entry(x) => {
                let mut e = Enc::new(3);
                e.str(&x.key).u8(kind_byte(x.kind)).str(&x.ftype).u32(x.mode);
                enc_opt_u32(&mut e, x.uid);
                enc_opt_u32(&mut e, x.gid);
                e.u64(x.size).str(&x.path).finish()
            }
            HelperMsg::Finding(f) => Enc::new(4)
                .str(&f.key)
                .str(&f.level)
                .str(&f.path)
                .str(&f.message)
                .finish(),
            HelperMsg::Size { key, entries, bytes } => Enc::new(5).str(key).u64(*entries).u64(*bytes).finish(),
            HelperMsg::Removed { name, error } => {
                let mut e = Enc::new(6);
                e.str(name);
                opt_str(&mut e, error);
                e.finish()
            }
            HelperMsg::Failed { message } => Enc::new(7).str(message).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => HelperMsg::Userns,
            2 => HelperMsg::NoUserns,
            3 => {
                let key = d.str()?;
                let kind = match d.u8()? {
                    1 => Kind::Added,
                    2 => Kind::Modified,
                    3 => Kind::Deleted,
                    4 => Kind::Opaque,
                    _ => return Err(DecodeError::BadValue("entry kind")),
                };
                HelperMsg::Entry(Entry {
                    key,
                    kind,
                    ftype: d.str()?,
                    mode: d.u32()?,
                    uid: dec_opt_u32(&mut d)?,
                    gid: dec_opt_u32(&mut d)?,
                    size: d.u64()?,
                    path: d.str()?,
                })
            }
            4 => HelperMsg::Finding(Finding {
                key: d.str()?,
                level: d.str()?,
                path: d.str()?,
                message: d.str()?,
            }),
            5 => HelperMsg::Size {
                key: d.str()?,
                entries: d.u64()?,
                bytes: d.u64()?,
            },
            6 => HelperMsg::Removed {
                name: d.str()?,
                error: if d.flag()? { Some(d.str()?) } else { None },
            },
            7 => HelperMsg::Failed { message: d.str()? },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            HelperMsg::Userns => "Userns",
            HelperMsg::NoUserns => "NoUserns",
            HelperMsg::Entry(_) => "Entry",
            HelperMsg::Finding(_) => "Finding",
            HelperMsg::Size { .. } => "Size",
            HelperMsg::Removed { .. } => "Removed",
            HelperMsg::Failed { .. } => "Failed",
        }
    }
}

impl Message for HelperCmd {
    fn encode(&self) -> Vec<u8> {
        match self {
            HelperCmd::Mapped { ops } => {
                let mut e = Enc::new(1);
                e.u32(ops.len() as u32);
                for op in ops {
                    match op {
                        Op::Walk { key, driver } => e.u8(1).str(key).u8(match driver {
                            Driver::Kernel => 1,
                            Driver::Fuse => 2,
                        }),
                        Op::Size { name, in_root } => e.u8(2).str(name).u8(*in_root as u8),
                        Op::Remove { name } => e.u8(3).str(name),
                    };
                }
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => {
                let mut ops = Vec::new();
                for _ in 0..d.count()? {
                    ops.push(match d.u8()? {
                        1 => Op::Walk {
                            key: d.str()?,
                            driver: match d.u8()? {
                                1 => Driver::Kernel,
                                2 => Driver::Fuse,
                                _ => return Err(DecodeError::BadValue("driver")),
                            },
                        },
                        2 => Op::Size {
                            name: d.str()?,
                            in_root: d.flag()?,
                        },
                        3 => Op::Remove { name: d.str()? },
                        _ => return Err(DecodeError::BadValue("operation")),
                    });
                }
                HelperCmd::Mapped { ops }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        "Mapped"
    }
}

/// Why the helper did not report its user namespace.
#[derive(Debug)]
pub enum UsernsError {
    /// The helper said why.
    Failed(String),
    Unexpected(UnexpectedMessage),
    /// EOF, a broken pipe or a malformed frame.
    Read(ReadError),
}

impl std::fmt::Display for UsernsError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            UsernsError::Failed(m) => write!(f, "{m}"),
            UsernsError::Unexpected(u) => write!(f, "{u}"),
            UsernsError::Read(e) => write!(f, "{e}"),
        }
    }
}

/// The parent's end of the helper's stdout.
pub struct HelperReceiver<R: Read> {
    out: R,
    reader: FrameReader,
}

impl<R: Read> HelperReceiver<R> {
    pub fn new(out: R) -> Self {
        HelperReceiver {
            out,
            reader: FrameReader::default(),
        }
    }

    /// Step 1: the helper's user namespace exists. `Err` carries what the
    /// helper said instead (for the error message).
    pub fn wait_for_userns(&mut self) -> Result<(), UsernsError> {
        match self.reader.recv::<HelperMsg>(&mut self.out) {
            Ok(HelperMsg::Userns) => Ok(()),
            Ok(HelperMsg::Failed { message }) => Err(UsernsError::Failed(message)),
            Ok(m) => Err(UsernsError::Unexpected(UnexpectedMessage::of("Userns", &m))),
            Err(e) => Err(UsernsError::Read(e)),
        }
    }

    /// Step 2: the whole report, until EOF. A malformed or cut frame, or
    /// a handshake message in the report, is an error.
    pub fn wait_for_report(mut self) -> Result<Vec<HelperMsg>, ReadError> {
        let all = super::read_rest::<HelperMsg>(&mut self.reader, &mut self.out)?;
        if let Some(m) = all
            .iter()
            .find(|m| matches!(m, HelperMsg::Userns | HelperMsg::NoUserns))
        {
            return Err(ReadError::Decode(DecodeError::BadValue(m.name())));
        }
        Ok(all)
    }
}

/// The helper's end of its stdin, step 1: wait for `Mapped` and its
/// operations. EOF or a malformed frame: `None`.
pub fn wait_for_mapped(stdin: &mut impl Read) -> Option<Vec<Op>> {
    match FrameReader::default().recv::<HelperCmd>(stdin) {
        Ok(HelperCmd::Mapped { ops }) => Some(ops),
        Err(_) => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn samples() -> Vec<HelperMsg> {
        vec![
            HelperMsg::Userns,
            HelperMsg::NoUserns,
            HelperMsg::Entry(Entry {
                key: "usr".into(),
                kind: Kind::Added,
                ftype: "file".into(),
                mode: 0o4755,
                uid: Some(0),
                gid: None,
                size: 12,
                path: "local/bin/a\tb\nc\\d".into(),
            }),
            HelperMsg::Finding(Finding {
                key: "etc".into(),
                level: "error".into(),
                path: "x".into(),
                message: "bad thing".into(),
            }),
            HelperMsg::Size {
                key: "usr".into(),
                entries: 3,
                bytes: 4096,
            },
            HelperMsg::Removed {
                name: ".trash-usr-1".into(),
                error: None,
            },
            HelperMsg::Removed {
                name: ".trash-usr-2".into(),
                error: Some("EBUSY".into()),
            },
            HelperMsg::Failed {
                message: "missing --root".into(),
            },
        ]
    }

    pub(crate) fn samples_cmd() -> Vec<HelperCmd> {
        vec![
            HelperCmd::Mapped { ops: vec![] },
            HelperCmd::Mapped {
                ops: vec![
                    Op::Walk {
                        key: "home%2fagent".into(),
                        driver: Driver::Fuse,
                    },
                    Op::Size {
                        name: "ignored".into(),
                        in_root: true,
                    },
                    Op::Remove {
                        name: ".trash-usr-1".into(),
                    },
                ],
            },
        ]
    }

    fn stream(msgs: &[HelperMsg]) -> Vec<u8> {
        msgs.iter().flat_map(|m| m.encode()).collect()
    }

    #[test]
    fn handshake_then_report() {
        let all = samples();
        let mut s = stream(&all[..1]);
        s.extend(stream(&all[2..7]));
        let mut rx = HelperReceiver::new(&s[..]);
        rx.wait_for_userns().unwrap();
        assert_eq!(rx.wait_for_report().unwrap(), all[2..7].to_vec());
        // The old text report is refused, not skipped.
        let mut s = stream(&all[..1]);
        s.extend_from_slice(b"S\tusr\t3\t4096\n");
        let mut rx = HelperReceiver::new(&s[..]);
        rx.wait_for_userns().unwrap();
        assert!(rx.wait_for_report().is_err());
        // A report cut inside a frame is an error.
        let mut s = stream(&all[..1]);
        let e = stream(&all[2..3]);
        s.extend_from_slice(&e[..e.len() - 2]);
        let mut rx = HelperReceiver::new(&s[..]);
        rx.wait_for_userns().unwrap();
        assert!(rx.wait_for_report().is_err());
        // No user namespace: said so.
        let s = stream(&all[1..2]);
        assert_eq!(
            HelperReceiver::new(&s[..]).wait_for_userns().unwrap_err().to_string(),
            "expected Userns, received NoUserns"
        );
        let cmd = &samples_cmd()[1];
        let HelperCmd::Mapped { ops } = cmd;
        assert_eq!(wait_for_mapped(&mut &cmd.encode()[..]).as_ref(), Some(ops));
        assert_eq!(wait_for_mapped(&mut &b"mapped\n"[..]), None);
        assert_eq!(wait_for_mapped(&mut &b""[..]), None);
    }
}
