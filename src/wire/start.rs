//! Host Coordinator → the Client CLI that spawned it, on the start pipe:
//! progress steps, then `Ready` or `Failed`; the pipe closes after either.
//!
//! The other way, on the secrets pipe (only for a profile with `secrets`,
//! `coordinator --secrets`): one [`SecretsMsg`] with the values the CLI
//! resolved on the host (issue 31). The pipe is the only place they
//! travel: never argv, environment or a file.

use std::fs::File;

use super::{Message, ReadError};
use crate::wire::codec::{Dec, DecodeError, Enc, Field, FrameReader};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartMsg {
    /// A startup step began (shown on the CLI's progress line).
    Progress { step: String },
    /// The Domain is published: connect to it.
    Ready,
    /// Startup failed with this sentence.
    Failed { reason: String },
    /// Startup failed: a forward's host port is taken (bad input).
    PortTaken(crate::config::ports::Taken),
}

impl Message for StartMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            StartMsg::Progress { step } => Enc::new(1).str(step).finish(),
            StartMsg::Ready => Enc::new(2).finish(),
            StartMsg::Failed { reason } => Enc::new(3).str(reason).finish(),
            StartMsg::PortTaken(t) => {
                let mut e = Enc::new(4);
                t.put(&mut e);
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => StartMsg::Progress { step: d.str()? },
            2 => StartMsg::Ready,
            3 => StartMsg::Failed { reason: d.str()? },
            4 => StartMsg::PortTaken(Field::get(&mut d)?),
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            StartMsg::Progress { .. } => "Progress",
            StartMsg::Ready => "Ready",
            StartMsg::Failed { .. } => "Failed",
            StartMsg::PortTaken(_) => "PortTaken",
        }
    }
}

/// Client CLI → Host Coordinator, once, on the secrets pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretsMsg {
    /// (variable, real value) per secret of the profile, in config order.
    Values(Vec<(String, crate::config::secrets::SecretValue)>),
}

impl Message for SecretsMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            SecretsMsg::Values(v) => {
                let mut e = Enc::new(1);
                e.u32(v.len() as u32);
                for (k, val) in v {
                    e.str(k).bytes(val.expose());
                }
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => {
                let n = d.count()?;
                let mut v = Vec::new();
                for _ in 0..n {
                    let k = d.str()?;
                    // The value is checked again (a value the CLI would have
                    // refused is no value here either), and re-encodes the same.
                    let raw = d.bytes()?;
                    let val = crate::config::secrets::SecretValue::new(raw.clone())
                        .ok()
                        .filter(|x| x.expose() == raw.as_slice())
                        .ok_or(DecodeError::BadValue("secret value"))?;
                    let mut raw = raw;
                    raw.iter_mut().for_each(|b| *b = 0);
                    v.push((k, val));
                }
                SecretsMsg::Values(v)
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        "Values"
    }
}

#[derive(Debug)]
pub enum StartError {
    /// The coordinator reported a failure.
    Failed(String),
    /// A forward's host port is taken.
    PortTaken(crate::config::ports::Taken),
    /// The pipe closed, broke or carried a malformed frame.
    Read(ReadError),
}

/// The CLI's end of the start pipe.
pub struct StartReceiver {
    pipe: File,
    reader: FrameReader,
}

impl StartReceiver {
    pub fn new(pipe: File) -> StartReceiver {
        StartReceiver {
            pipe,
            reader: FrameReader::default(),
        }
    }

    /// Blocks until the coordinator reports `Ready` (Ok) or `Failed`;
    /// each `Progress` step goes to `progress` meanwhile.
    pub fn wait_for_ready(&mut self, mut progress: impl FnMut(&str)) -> Result<(), StartError> {
        loop {
            match self.reader.recv::<StartMsg>(&mut self.pipe) {
                Ok(StartMsg::Progress { step }) => progress(&step),
                Ok(StartMsg::Ready) => return Ok(()),
                Ok(StartMsg::Failed { reason }) => return Err(StartError::Failed(reason)),
                Ok(StartMsg::PortTaken(t)) => return Err(StartError::PortTaken(t)),
                Err(e) => return Err(StartError::Read(e)),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn samples() -> Vec<StartMsg> {
        vec![
            StartMsg::Progress {
                step: "preparing image".into(),
            },
            StartMsg::Ready,
            StartMsg::Failed {
                reason: "line one\nline two".into(),
            },
            StartMsg::PortTaken(crate::config::ports::Taken {
                port: "127.0.0.1:18080:8080".parse().unwrap(),
                holder: Some(crate::domain::DomainId::parse("0123456789abcdef0123").unwrap()),
            }),
            StartMsg::PortTaken(crate::config::ports::Taken {
                port: "0.0.0.0:80:80".parse().unwrap(),
                holder: None,
            }),
        ]
    }

    pub(crate) fn samples_secrets() -> Vec<SecretsMsg> {
        let v = |s: &str| crate::config::secrets::SecretValue::new(s.as_bytes().to_vec()).unwrap();
        vec![
            SecretsMsg::Values(vec![]),
            SecretsMsg::Values(vec![("A".into(), v("sk-value-1")), ("B".into(), v("sk-value-2"))]),
        ]
    }

    #[test]
    fn secrets_refuse_a_value_the_cli_would_not_send() {
        let mut e = Enc::new(1);
        e.u32(1).str("A").bytes(b"has space inside");
        assert!(crate::wire::decode_one::<SecretsMsg>(&e.finish()).is_err());
        let mut e = Enc::new(1);
        e.u32(1).str("A").bytes(b" padded-value");
        assert!(crate::wire::decode_one::<SecretsMsg>(&e.finish()).is_err());
    }

    fn pipe_with(msgs: &[StartMsg], extra: &[u8]) -> File {
        let (r, w) = crate::sys::pipe().unwrap();
        let mut w = File::from(w);
        for m in msgs {
            crate::wire::codec::send(&mut w, m).unwrap();
        }
        std::io::Write::write_all(&mut w, extra).unwrap();
        File::from(r)
    }

    #[test]
    fn wait_for_ready_passes_progress_and_fails_closed() {
        let mut steps = Vec::new();
        let p = pipe_with(&samples()[..2], b"");
        assert!(StartReceiver::new(p)
            .wait_for_ready(|s| steps.push(s.to_string()))
            .is_ok());
        assert_eq!(steps, ["preparing image"]);
        let p = pipe_with(&samples()[2..], b"");
        assert!(matches!(
            StartReceiver::new(p).wait_for_ready(|_| {}),
            Err(StartError::Failed(r)) if r == "line one\nline two"
        ));
        // The old line format is not understood, and EOF is not readiness.
        let p = pipe_with(&[], b"ready\n");
        assert!(matches!(
            StartReceiver::new(p).wait_for_ready(|_| {}),
            Err(StartError::Read(_))
        ));
        let p = pipe_with(&samples()[..1], b"");
        assert!(matches!(
            StartReceiver::new(p).wait_for_ready(|_| {}),
            Err(StartError::Read(ReadError::Closed))
        ));
    }
}
