//! Asynchronous socket work (tokio): reading and writing framed messages, the join handshake,
//! and the reader, writer and heartbeat tasks that keep every connection watched.
//!
//! Topology: a star. Rank 0 accepts one connection from every other rank and relays collectives.
//! Failure detection: a connection that closes without a `Goodbye`, or stays silent for the peer
//! timeout while heartbeats should flow, marks its peer dead. Rank 0 relays a death to everyone
//! with an `Abort` frame, so every rank learns of any rank's death within the peer timeout. A
//! rank that leaves alone (`Bootstrap::leave`) says goodbye with [`GOODBYE_ALONE`]: the others
//! record it as a death described by [`LEFT`], without logging an error.
//!
//! Beside the framed I/O and the world table here: `shared` (the state the blocking API and
//! the tasks share, and how a failure spreads), `tasks` (reader, writer, heartbeat), `root`
//! (rank 0's side of the join, and its guard afterwards) and `peer` (the other ranks' side).

mod peer;
mod root;
mod shared;
mod tasks;

pub(crate) use self::{
    peer::peer_join,
    root::root_join,
    shared::{Failure, Out, Shared, Unsent},
};

use std::time::Duration;

/// The payload of a `Goodbye` sent by a rank leaving alone (`Bootstrap::leave`), not after
/// finalize's barrier (empty payload).
pub(crate) const GOODBYE_ALONE: &[u8] = b"alone";

/// How a rank that left alone is described: its peers record it as a death, quietly (no error
/// is logged until an operation needs it).
pub const LEFT: &str = "it left the job without finalize";

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{self, FLAG_MORE, FrameError, HEADER_LEN, Kind, MAX_FRAME, Reader, Writer};

/// How a frame read can fail.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Clean end of stream before a header.
    Eof,
    /// Nothing arrived for the idle timeout.
    Idle(Duration),
    /// Socket error or a stream cut inside a frame.
    Io(String),
    /// The peer reset the connection (it turned us away).
    Reset,
    /// The bytes are not a valid frame; the secret the peer sent comes along when it can be read.
    Frame(FrameError, Option<u64>),
}

/// Fills `buf`, failing when no byte arrives for `idle`. `at_boundary` makes an immediate end of
/// stream a clean [`ReadError::Eof`].
async fn read_full<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    idle: Duration,
    at_boundary: bool,
) -> Result<(), ReadError> {
    let mut off = 0;
    while off < buf.len() {
        match tokio::time::timeout(idle, r.read(&mut buf[off..])).await {
            Err(_) => return Err(ReadError::Idle(idle)),
            Ok(Ok(0)) if off == 0 && at_boundary => return Err(ReadError::Eof),
            Ok(Ok(0)) => return Err(ReadError::Io("connection closed inside a frame".into())),
            Ok(Ok(n)) => off += n,
            Ok(Err(e)) if is_reset(&e) => return Err(ReadError::Reset),
            Ok(Err(e)) => return Err(ReadError::Io(e.to_string())),
        }
    }
    Ok(())
}

/// Reads one whole message (one or more frames of one kind). The payload buffer grows in steps
/// of at most 64 KiB as bytes arrive, never by the length a header claims.
pub(crate) async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    secret: u64,
    max_frame: u32,
    idle: Duration,
) -> Result<(Kind, Vec<u8>), ReadError> {
    let mut payload = Vec::new();
    let mut kind = None;
    loop {
        let mut hb = [0u8; HEADER_LEN];
        read_full(r, &mut hb, idle, kind.is_none()).await?;
        let h = frame::decode_header(&hb, secret, max_frame).map_err(|e| {
            let theirs = u64::from_le_bytes(hb[8..16].try_into().expect("8 bytes"));
            ReadError::Frame(e, Some(theirs))
        })?;
        if kind.is_some_and(|k| k != h.kind) {
            return Err(ReadError::Frame(
                FrameError::Malformed("continuation frame of another kind"),
                None,
            ));
        }
        kind = Some(h.kind);
        let mut left = h.len as usize;
        while left > 0 {
            let step = left.min(64 << 10);
            let start = payload.len();
            payload.resize(start + step, 0);
            read_full(r, &mut payload[start..], idle, false).await?;
            left -= step;
        }
        if h.flags & FLAG_MORE == 0 {
            return Ok((h.kind, payload));
        }
    }
}

/// Writes one message, split into frames of at most [`MAX_FRAME`] bytes.
pub(crate) async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: Kind,
    secret: u64,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut chunks = payload.chunks(MAX_FRAME as usize).peekable();
    if chunks.peek().is_none() {
        return w.write_all(&frame::encode_header(kind, 0, secret, 0)).await;
    }
    while let Some(c) = chunks.next() {
        let flags = if chunks.peek().is_some() {
            FLAG_MORE
        } else {
            0
        };
        let h = frame::encode_header(kind, flags, secret, c.len() as u32);
        if c.len() <= 16 << 10 {
            // One write for small frames: with TCP_NODELAY two writes would be two packets.
            let mut one = Vec::with_capacity(HEADER_LEN + c.len());
            one.extend_from_slice(&h);
            one.extend_from_slice(c);
            w.write_all(&one).await?;
        } else {
            w.write_all(&h).await?;
            w.write_all(c).await?;
        }
    }
    Ok(())
}

/// Whether an I/O error says the peer closed or reset the connection.
pub(super) fn is_reset(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
}

/// One rank's entry in the world table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The rank.
    pub rank: usize,
    /// Host identity (equal ⇔ same host).
    pub host_id: String,
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: u32,
}

pub(super) fn encode_world(world: &[PeerInfo]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(world.len() as u32);
    for p in world {
        w.str(&p.host_id).str(&p.hostname).u32(p.pid);
    }
    w.0
}

pub(super) fn decode_world(b: &[u8], n: usize) -> Result<Vec<PeerInfo>, FrameError> {
    let mut r = Reader::new(b, "welcome");
    if r.u32()? as usize != n {
        return Err(FrameError::BadPayload {
            what: "welcome",
            reason: "world size differs",
        });
    }
    let world = (0..n)
        .map(|rank| {
            Ok(PeerInfo {
                rank,
                host_id: r.str()?.to_string(),
                hostname: r.str()?.to_string(),
                pid: r.u32()?,
            })
        })
        .collect::<Result<Vec<_>, FrameError>>()?;
    r.finish()?;
    Ok(world)
}
