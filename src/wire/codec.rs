//! The one codec every process edge speaks (`crate::wire`): length-prefixed
//! frames of tagged fields, written and read by hand.
//!
//! Frame: `u32 LE payload length` + payload; payload = `u8 tag` + fields.
//! Fields: `u8`, `u16`/`u32`/`u64`/`i32` little endian, byte strings as
//! `u32 length + bytes`, lists as `u32 count + items` (at most
//! [`MAX_ITEMS`]). A length is checked against what remains of the frame
//! before anything is allocated, and the frame length against
//! [`MAX_FRAME_LEN`] before the frame is buffered; a frame with bytes left
//! over after its message is an error.

use std::fmt;
use std::io::{self, Read, Write};

/// Largest payload accepted on any edge.
pub const MAX_FRAME_LEN: usize = 256 * 1024;
/// Bounds on list lengths inside a frame.
pub(crate) const MAX_ITEMS: u32 = 4096;

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    FrameTooLarge(usize),
    Truncated,
    UnknownTag(u8),
    TooManyItems(u32),
    BadUtf8,
    TrailingBytes(usize),
    BadFlag(u8),
    /// A field outside what its message allows (named).
    BadValue(&'static str),
    /// A port forward's text other than its one canonical spelling
    /// (`ADDR:HOSTPORT:GUESTPORT`, as `PortForward` writes it).
    PortForward(crate::config::ports::CanonicalError),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            DecodeError::FrameTooLarge(n) => write!(f, "frame of {n} bytes exceeds the {MAX_FRAME_LEN}-byte maximum"),
            DecodeError::Truncated => write!(f, "frame ends inside a field"),
            DecodeError::UnknownTag(t) => write!(f, "unknown message tag {t}"),
            DecodeError::TooManyItems(n) => write!(f, "list of {n} items exceeds the maximum {MAX_ITEMS}"),
            DecodeError::BadUtf8 => write!(f, "string field is not UTF-8"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after the message"),
            DecodeError::BadFlag(b) => write!(f, "flag byte {b} is neither 0 nor 1"),
            DecodeError::BadValue(what) => write!(f, "field {what} holds a value its message does not allow"),
            DecodeError::PortForward(why) => write!(f, "field port forward is not ADDR:HOSTPORT:GUESTPORT: {why}"),
        }
    }
}

// ---- fields --------------------------------------------------------------

pub(crate) struct Enc(Vec<u8>);

impl Enc {
    pub(crate) fn new(tag: u8) -> Enc {
        Enc(vec![0, 0, 0, 0, tag])
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub(crate) fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub(crate) fn strs(&mut self, v: &[String]) -> &mut Self {
        self.u32(v.len() as u32);
        for s in v {
            self.str(s);
        }
        self
    }
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        std::mem::take(&mut self.0)
    }
}

pub(crate) struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    pub(crate) fn new(payload: &'a [u8]) -> Dec<'a> {
        Dec(payload)
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    pub(crate) fn str(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?).map_err(|_| DecodeError::BadUtf8)
    }
    pub(crate) fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(DecodeError::BadFlag(b)),
        }
    }
    pub(crate) fn count(&mut self) -> Result<u32, DecodeError> {
        let n = self.u32()?;
        if n > MAX_ITEMS {
            return Err(DecodeError::TooManyItems(n));
        }
        Ok(n)
    }
    pub(crate) fn strs(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self.count()?;
        (0..n).map(|_| self.str()).collect()
    }
    pub(crate) fn end(&self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.0.len()))
        }
    }
}

// ---- typed fields ------------------------------------------------------------

/// A value with one wire form, so that a message's fields are named once
/// ([`record!`], [`messages!`]) and written and read in the same order.
/// `bool` is a flag byte, `Option<T>` a flag then `T`, `Vec<u8>` a byte
/// string, any other `Vec` a bounded list, a pair its two halves.
pub(crate) trait Field: Sized {
    fn put(&self, e: &mut Enc);
    fn get(d: &mut Dec) -> Result<Self, DecodeError>;
}

/// A type that may stand in a list (`u32 count + items`).
pub(crate) trait Listed: Field {}

macro_rules! plain_fields {
    ($($t:ty),*) => {
        $(impl Field for $t {
            fn put(&self, e: &mut Enc) {
                e.0.extend_from_slice(&self.to_le_bytes());
            }
            fn get(d: &mut Dec) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(d.take(std::mem::size_of::<$t>())?.try_into().unwrap()))
            }
        })*
    };
}
plain_fields!(u8, u16, u32, i32, u64, i64);

impl Field for bool {
    fn put(&self, e: &mut Enc) {
        e.u8(*self as u8);
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        d.flag()
    }
}

impl Field for String {
    fn put(&self, e: &mut Enc) {
        e.str(self);
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        d.str()
    }
}
impl Listed for String {}

impl Field for Vec<u8> {
    fn put(&self, e: &mut Enc) {
        e.bytes(self);
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        d.bytes()
    }
}

impl<T: Listed> Field for Vec<T> {
    fn put(&self, e: &mut Enc) {
        e.u32(self.len() as u32);
        for x in self {
            x.put(e);
        }
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        let n = d.count()?;
        (0..n).map(|_| T::get(d)).collect()
    }
}

impl<T: Field> Field for Option<T> {
    fn put(&self, e: &mut Enc) {
        match self {
            Some(x) => x.put(e.u8(1)),
            None => {
                e.u8(0);
            }
        }
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        if d.flag()? {
            T::get(d).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<A: Field, B: Field> Field for (A, B) {
    fn put(&self, e: &mut Enc) {
        self.0.put(e);
        self.1.put(e);
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        Ok((A::get(d)?, B::get(d)?))
    }
}
impl<A: Field, B: Field> Listed for (A, B) {}

/// [`Field`] for a struct: its fields, named in wire order, one after the
/// other. `record!(T { a, b })`; `T` may then stand in a list too.
macro_rules! record {
    ($t:ident { $($f:ident),* $(,)? }) => {
        impl $crate::wire::codec::Field for $t {
            fn put(&self, e: &mut $crate::wire::codec::Enc) {
                $($crate::wire::codec::Field::put(&self.$f, e);)*
            }
            fn get(d: &mut $crate::wire::codec::Dec) -> Result<Self, $crate::wire::codec::DecodeError> {
                Ok($t {
                    $($f: $crate::wire::codec::Field::get(d)?,)*
                })
            }
        }
        impl $crate::wire::codec::Listed for $t {}
    };
}
pub(crate) use record;

/// [`Message`] for a message enum, each variant written once: its tag, its
/// name and its fields in wire order (`1 => Hello { version, id }`,
/// `3 => Stdin(data)`, `4 => StdinEof`). A variant's payload is its tag
/// then each field's [`Field`] form; its name is the variant's.
macro_rules! messages {
    ($m:ident { $($tag:literal => $v:ident $(($one:ident))? $({ $($f:ident),* $(,)? })?),* $(,)? }) => {
        impl $crate::wire::codec::Message for $m {
            fn encode(&self) -> Vec<u8> {
                use $crate::wire::codec::Field;
                match self {
                    $($m::$v $(($one))? $({ $($f),* })? => {
                        let mut e = $crate::wire::codec::Enc::new($tag);
                        $($one.put(&mut e);)?
                        $($($f.put(&mut e);)*)?
                        e.finish()
                    })*
                }
            }

            fn decode(payload: &[u8]) -> Result<Self, $crate::wire::codec::DecodeError> {
                use $crate::wire::codec::Field;
                let mut d = $crate::wire::codec::Dec::new(payload);
                let msg = match d.u8()? {
                    $($tag => {
                        $(let $one = Field::get(&mut d)?;)?
                        $($(let $f = Field::get(&mut d)?;)*)?
                        $m::$v $(($one))? $({ $($f),* })?
                    })*
                    t => return Err($crate::wire::codec::DecodeError::UnknownTag(t)),
                };
                d.end()?;
                Ok(msg)
            }

            fn name(&self) -> &'static str {
                match self {
                    $($m::$v { .. } => stringify!($v),)*
                }
            }
        }
    };
}
pub(crate) use messages;

/// A message type that travels in frames.
pub trait Message: Sized {
    fn encode(&self) -> Vec<u8>;
    fn decode(payload: &[u8]) -> Result<Self, DecodeError>;
    /// The variant's name, for errors (`UnexpectedMessage`) and logs.
    fn name(&self) -> &'static str;
}

/// Accumulates bytes read from a connection and yields whole frames.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Decode(DecodeError),
    Closed,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Decode(e) => write!(f, "{e}"),
            ReadError::Closed => write!(f, "connection closed"),
        }
    }
}

impl FrameReader {
    /// No partial frame is buffered.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// How many bytes are buffered (of frames not yet taken).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends bytes received from the peer.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete message, if one is buffered. A frame header that
    /// announces more than [`MAX_FRAME_LEN`] is an error at once, before the
    /// rest of the frame arrives.
    pub fn next<M: Message>(&mut self) -> Result<Option<M>, DecodeError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(self.buf[..4].try_into().unwrap()) as usize;
        if len > MAX_FRAME_LEN {
            return Err(DecodeError::FrameTooLarge(len));
        }
        if len == 0 {
            return Err(DecodeError::Truncated);
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let msg = M::decode(&self.buf[4..4 + len]);
        self.buf.drain(..4 + len);
        msg.map(Some)
    }

    /// Reads once from `r` (which may be non-blocking) into the buffer.
    /// `Ok(false)` on WouldBlock.
    pub fn fill(&mut self, r: &mut impl Read) -> Result<bool, ReadError> {
        let mut chunk = [0u8; 64 * 1024];
        match r.read(&mut chunk) {
            Ok(0) => Err(ReadError::Closed),
            Ok(n) => {
                self.push(&chunk[..n]);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    /// Blocking receive of one message.
    pub fn recv<M: Message>(&mut self, r: &mut impl Read) -> Result<M, ReadError> {
        loop {
            if let Some(m) = self.next::<M>().map_err(ReadError::Decode)? {
                return Ok(m);
            }
            self.fill(r)?;
        }
    }
}

/// Blocking send of one message.
pub fn send<M: Message>(w: &mut impl Write, msg: &M) -> io::Result<()> {
    w.write_all(&msg.encode())
}
