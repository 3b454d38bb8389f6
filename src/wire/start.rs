//! Host Coordinator → the Client CLI that spawned it, on the start pipe:
//! progress steps, then `Ready` or `Failed`; the pipe closes after either.

use std::fs::File;

use super::{Message, ReadError};
use crate::wire::codec::{Dec, DecodeError, Enc, FrameReader};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartMsg {
    /// A startup step began (shown on the CLI's progress line).
    Progress { step: String },
    /// The Domain is published: connect to it.
    Ready,
    /// Startup failed with this sentence.
    Failed { reason: String },
}

impl Message for StartMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            StartMsg::Progress { step } => Enc::new(1).str(step).finish(),
            StartMsg::Ready => Enc::new(2).finish(),
            StartMsg::Failed { reason } => Enc::new(3).str(reason).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => StartMsg::Progress { step: d.str()? },
            2 => StartMsg::Ready,
            3 => StartMsg::Failed { reason: d.str()? },
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
        }
    }
}

#[derive(Debug)]
pub enum StartError {
    /// The coordinator reported a failure.
    Failed(String),
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
        ]
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
