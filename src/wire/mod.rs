//! Every process edge speaks framed messages: one codec, one closed message
//! enum per edge, step-named receivers.
//!
//! The framing and field codec is [`codec`] (`u32 LE length` + `u8 tag` +
//! fields, bounded lengths, no trailing bytes). The edges:
//!
//! | Edge | Enum | Carried on |
//! | --- | --- | --- |
//! | Client CLI ↔ Host Coordinator | [`client::ClientMsg`], [`client::ServerMsg`] | the coordinator's socket |
//! | Client CLI ↔ Host Coordinator of any build (status, stop) | [`basic::BasicRequest`], [`basic::BasicInfo`] (frozen) | the coordinator's socket, first frame instead of `Hello` |
//! | coordinator → spawning CLI (startup) | [`start::StartMsg`] | the start pipe (`coordinator::START_FD`) |
//! | spawning CLI → coordinator (secrets) | [`start::SecretsMsg`] | the secrets pipe (`coordinator::SECRETS_FD`), one frame |
//! | supervisor → coordinator | [`supervisor::StatusMsg`] | the status pipe (`supervisor::STATUS_FD`) |
//! | coordinator → supervisor | [`supervisor::LeaseMsg`] | the lease pipe (`supervisor::LEASE_FD`): `Mapped` (then `Secrets` with `--secrets`); EOF = stop |
//! | coordinator → supervisor (plans) | [`plan::PlanMsg`] | one frame per plan file in the generation dir |
//! | state helper → parent | [`helper::HelperMsg`] | the helper's stdout |
//! | parent → state helper | [`helper::HelperCmd`] | the helper's stdin |
//! | sandbox init (PID 1) → supervisor | [`guest::InitMsg`] | init's stdout (`runsc run`'s): the boot probe's checks and the user's setup, then `Ready` |
//! | coordinator → sandbox init (PID 1) | [`guest::BootCmd`] | `gen/boot-request`, `runsc run`'s stdin (frames, then EOF) |
//! | coordinator → `lazaret net show`; supervisor → `lazaret ps` (`gen/disk`) | [`show::ShowMsg`] | one frame per file in the generation dir |
//! | `lazaret-escalate` (in the sandbox) → coordinator | [`mailbox::RequestMsg`] | one signed frame per `<id>.req` file in the Escalation Mailbox |
//! | coordinator → `lazaret-escalate` | [`mailbox::ResultMsg`] | one frame per `<id>.res` file in the mailbox |
//!
//! A malformed frame, an unknown tag or a field out of range is an error
//! (fail closed); a well-formed message that the receiving step does not
//! expect is an [`UnexpectedMessage`].

pub mod basic;
pub mod client;
pub mod codec;
pub mod guest;
pub mod helper;
pub mod mailbox;
pub mod plan;
pub mod show;
pub mod start;
pub mod supervisor;

use std::fmt;
use std::io::{self, Read};

use crate::wire::codec::{Dec, Enc};
pub use crate::wire::codec::{DecodeError, FrameReader, Message, ReadError};

/// A well-formed message that the receiving step did not expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnexpectedMessage {
    pub expected: &'static str,
    pub received: &'static str,
}

impl fmt::Display for UnexpectedMessage {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "expected {}, received {}", self.expected, self.received)
    }
}

impl UnexpectedMessage {
    pub fn of(expected: &'static str, received: &impl Message) -> UnexpectedMessage {
        UnexpectedMessage {
            expected,
            received: received.name(),
        }
    }
}

// ---- shared field helpers ----------------------------------------------------

/// A process id: positive, never 0 or negative (which `kill` would read as a
/// group or every process).
pub(crate) fn dec_pid(d: &mut Dec) -> Result<i32, DecodeError> {
    match d.i32()? {
        p if p > 0 => Ok(p),
        _ => Err(DecodeError::BadValue("pid")),
    }
}

/// A path as its raw bytes (a host path need not be UTF-8).
pub(crate) fn enc_path(e: &mut Enc, p: &std::path::Path) {
    e.bytes(p.as_os_str().as_encoded_bytes());
}

pub(crate) fn dec_path(d: &mut Dec) -> Result<std::path::PathBuf, DecodeError> {
    use std::os::unix::ffi::OsStringExt;
    let b = d.bytes()?;
    if b.is_empty() || b.contains(&0) {
        return Err(DecodeError::BadValue("path"));
    }
    Ok(std::ffi::OsString::from_vec(b).into())
}

/// An absolute path.
pub(crate) fn dec_abs_path(d: &mut Dec) -> Result<std::path::PathBuf, DecodeError> {
    let p = dec_path(d)?;
    if !p.is_absolute() {
        return Err(DecodeError::BadValue("absolute path"));
    }
    Ok(p)
}

pub(crate) fn enc_opt_u32(e: &mut Enc, v: Option<u32>) {
    match v {
        Some(v) => e.u8(1).u32(v),
        None => e.u8(0),
    };
}

pub(crate) fn dec_opt_u32(d: &mut Dec) -> Result<Option<u32>, DecodeError> {
    Ok(if d.flag()? { Some(d.u32()?) } else { None })
}

/// Decodes a whole buffer that must hold exactly one frame (a plan file).
pub fn decode_one<M: Message>(buf: &[u8]) -> Result<M, DecodeError> {
    if buf.len() < 4 {
        return Err(DecodeError::Truncated);
    }
    let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
    if len > crate::wire::codec::MAX_FRAME_LEN {
        return Err(DecodeError::FrameTooLarge(len));
    }
    if buf.len() < 4 + len || len == 0 {
        return Err(DecodeError::Truncated);
    }
    if buf.len() > 4 + len {
        return Err(DecodeError::TrailingBytes(buf.len() - 4 - len));
    }
    M::decode(&buf[4..])
}

/// Why a one-frame file (a plan) could not be taken.
#[derive(Debug)]
pub enum FileError {
    /// Opening or reading the file failed.
    Read(std::path::PathBuf, io::Error),
    /// The file is not exactly one well-formed frame.
    Malformed(std::path::PathBuf, DecodeError),
    /// A well-formed message, but not the one this reader takes.
    Unexpected(std::path::PathBuf, UnexpectedMessage),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            FileError::Read(p, e) => write!(f, "{}: {e}", p.display()),
            FileError::Malformed(p, e) => write!(f, "{} is malformed: {e}", p.display()),
            FileError::Unexpected(p, u) => write!(f, "{}: {u}", p.display()),
        }
    }
}

impl std::error::Error for FileError {}

/// Reads a file holding exactly one frame, bounded by the frame maximum.
pub fn read_one<M: Message>(path: &std::path::Path) -> Result<M, FileError> {
    let read = |e| FileError::Read(path.to_path_buf(), e);
    let f = std::fs::File::open(path).map_err(read)?;
    let mut buf = Vec::new();
    f.take(crate::wire::codec::MAX_FRAME_LEN as u64 + 5)
        .read_to_end(&mut buf)
        .map_err(read)?;
    decode_one(&buf).map_err(|e| FileError::Malformed(path.to_path_buf(), e))
}

/// Reads every frame until EOF (a bounded report stream). A malformed frame
/// or a stream that ends inside a frame is an error.
#[cfg(test)]
pub fn read_all<M: Message>(r: &mut impl Read) -> Result<Vec<M>, ReadError> {
    read_rest(&mut FrameReader::default(), r)
}

/// [`read_all`] after earlier receives on the same stream.
pub fn read_rest<M: Message>(reader: &mut FrameReader, r: &mut impl Read) -> Result<Vec<M>, ReadError> {
    let mut out = Vec::new();
    loop {
        while let Some(m) = reader.next::<M>().map_err(ReadError::Decode)? {
            out.push(m);
        }
        match reader.fill(r) {
            Ok(_) => {}
            Err(ReadError::Closed) if reader.is_empty() => return Ok(out),
            Err(ReadError::Closed) => return Err(ReadError::Decode(DecodeError::Truncated)),
            Err(e) => return Err(e),
        }
    }
}

/// Writes one message to a raw fd (pipes handed over by number).
pub fn send_fd<M: Message>(fd: impl std::os::fd::AsFd, msg: &M) -> io::Result<()> {
    crate::sys::write_all(fd, &msg.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample of every edge, encoded.
    pub(crate) fn all_samples() -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = Vec::new();
        v.extend(start::tests::samples().iter().map(Message::encode));
        v.extend(start::tests::samples_secrets().iter().map(Message::encode));
        v.extend(supervisor::tests::samples_status().iter().map(Message::encode));
        v.extend(supervisor::tests::samples_lease().iter().map(Message::encode));
        v.extend(plan::tests::samples().iter().map(Message::encode));
        v.extend(helper::tests::samples().iter().map(Message::encode));
        v.extend(helper::tests::samples_cmd().iter().map(Message::encode));
        v.extend(guest::tests::samples_init().iter().map(Message::encode));
        v.extend(guest::tests::samples_cmd().iter().map(Message::encode));
        v.extend(show::tests::samples().iter().map(Message::encode));
        v.extend(mailbox::tests::samples_request().iter().map(Message::encode));
        v.extend(mailbox::tests::samples_result().iter().map(Message::encode));
        v
    }

    /// Decodes `payload` as `M`; whatever decodes re-encodes to the same
    /// bytes (no two encodings of one message, nothing dropped).
    fn check<M: Message>(payload: &[u8]) {
        if let Ok(m) = M::decode(payload) {
            assert_eq!(&m.encode()[4..], payload, "{}", m.name());
        }
    }

    #[test]
    fn every_sample_round_trips() {
        fn rt<M: Message + PartialEq + fmt::Debug>(v: Vec<M>) {
            for m in v {
                let b = m.encode();
                assert_eq!(decode_one::<M>(&b).unwrap(), m);
                let mut r = FrameReader::default();
                r.push(&b);
                assert_eq!(r.next::<M>().unwrap(), Some(m));
            }
        }
        rt(start::tests::samples());
        rt(start::tests::samples_secrets());
        rt(supervisor::tests::samples_status());
        rt(supervisor::tests::samples_lease());
        rt(plan::tests::samples());
        rt(helper::tests::samples());
        rt(helper::tests::samples_cmd());
        rt(guest::tests::samples_init());
        rt(guest::tests::samples_cmd());
        rt(show::tests::samples());
        rt(mailbox::tests::samples_request());
        rt(mailbox::tests::samples_result());
    }

    #[test]
    fn one_frame_files_refuse_short_long_and_trailing_input() {
        let b = supervisor::LeaseMsg::Mapped.encode();
        assert!(decode_one::<supervisor::LeaseMsg>(&b).is_ok());
        assert_eq!(
            decode_one::<supervisor::LeaseMsg>(&b[..b.len() - 1]),
            Err(DecodeError::Truncated)
        );
        let mut t = b.clone();
        t.push(0);
        assert_eq!(
            decode_one::<supervisor::LeaseMsg>(&t),
            Err(DecodeError::TrailingBytes(1))
        );
        assert_eq!(
            decode_one::<supervisor::LeaseMsg>(b"mapp"),
            Err(DecodeError::FrameTooLarge(0x7070_616d))
        );
        assert_eq!(decode_one::<supervisor::LeaseMsg>(b""), Err(DecodeError::Truncated));
    }

    #[test]
    fn read_all_fails_closed_on_a_cut_stream() {
        let mut b = helper::HelperMsg::Userns.encode();
        b.extend(helper::HelperMsg::Failed { message: "x".into() }.encode());
        assert_eq!(read_all::<helper::HelperMsg>(&mut &b[..]).unwrap().len(), 2);
        assert!(read_all::<helper::HelperMsg>(&mut &b[..b.len() - 1]).is_err());
        assert!(read_all::<helper::HelperMsg>(&mut &b"userns\n"[..]).is_err());
    }

    /// Feeds `f` 200,000 inputs from a xorshift generator seeded with
    /// `seed`: every third pure noise, the rest a valid frame of `valid`
    /// with one to four random byte changes, truncations or insertions.
    /// The corpus of every decoder's mutation test.
    pub(super) fn for_each_mutation(seed: u64, valid: &[Vec<u8>], mut f: impl FnMut(Vec<u8>)) {
        let mut seed = seed;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..200_000 {
            let input = if i % 3 == 0 {
                (0..(rnd() % 64)).map(|_| rnd() as u8).collect::<Vec<u8>>()
            } else {
                let mut v = valid[(rnd() as usize) % valid.len()].clone();
                for _ in 0..(1 + rnd() % 4) {
                    let p = (rnd() as usize) % v.len();
                    match rnd() % 3 {
                        0 => v[p] = rnd() as u8,
                        1 => v.truncate(p.max(1)),
                        _ => v.insert(p, rnd() as u8),
                    }
                }
                v
            };
            f(input);
        }
    }

    /// The mutation test of `wire::client`, over every other edge: mutations of
    /// valid frames and pure noise never panic any decoder, and whatever
    /// decodes re-encodes to the same bytes.
    #[test]
    fn every_decoder_survives_random_and_mutated_input() {
        for_each_mutation(0x2545f4914f6cdd1d, &all_samples(), |mut input| {
            let _ = decode_one::<plan::PlanMsg>(&input);
            let _ = decode_one::<show::ShowMsg>(&input);
            let _ = guest::read_boot_request(&mut &input[..]);
            // A decoded request's signed part is exactly what it says, and
            // the record is exactly its encoding.
            if let Ok((r, signed, sig)) = mailbox::decode_request(&input) {
                assert_eq!(signed, mailbox::signed_part(&r));
                assert_eq!(mailbox::encode_request(&r, &sig), input);
            }
            if let Ok(o) = mailbox::decode_result(&input) {
                assert_eq!(mailbox::encode_result(&o), input);
            }
            if let Ok((mailbox::Record::Agent(r), signed, sig)) = mailbox::decode_record(&input) {
                assert_eq!(signed, mailbox::agent_signed_part(&r));
                assert_eq!(mailbox::encode_agent_request(&r, &sig), input);
            }
            if let Ok((id, body)) = mailbox::decode_agent_reply(&input) {
                assert_eq!(mailbox::encode_agent_reply(&id, &body), input);
            }
            if input.len() > 4 {
                let payload = input.split_off(4);
                check::<start::StartMsg>(&payload);
                check::<supervisor::StatusMsg>(&payload);
                check::<supervisor::LeaseMsg>(&payload);
                check::<plan::PlanMsg>(&payload);
                check::<helper::HelperMsg>(&payload);
                check::<helper::HelperCmd>(&payload);
                check::<guest::InitMsg>(&payload);
                check::<guest::BootCmd>(&payload);
                check::<show::ShowMsg>(&payload);
                check::<mailbox::RequestMsg>(&payload);
                check::<mailbox::ResultMsg>(&payload);
            }
        });
    }

    #[test]
    fn names_are_variant_names() {
        let u = UnexpectedMessage::of("Ready", &supervisor::StatusMsg::Stopped);
        assert_eq!(u.to_string(), "expected Ready, received Stopped");
    }
}
