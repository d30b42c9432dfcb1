//! Handing an attached client's stdin and stdout to the background server (`SCM_RIGHTS` over
//! the Unix socket), so that the server reads and writes the MCP client's pipes itself and no
//! byte passes through `deputy serve`.
//!
//! The relay it replaces cost every message two more thread wake-ups, a pipe into `serve` and
//! the socket on to the server, each way: 46 µs a call, more than the Node reference server's
//! whole echo (docs/BENCHMARKS.md "Background server"). `serve` stays running, so that its
//! client keeps a live child process, until the server closes the socket; the server ends
//! that client's MCP session when `serve` goes away, as it did when the relay's socket closed.
//!
//! Only pipes and sockets are handed over: the server waits on them with epoll, which cannot
//! watch a regular file (`serve < requests.jsonl`), and a terminal stays with its process.
//! Anything else is relayed as before, and so is every client of a server that predates this
//! (its answer does not say it takes them).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::FileType;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use tokio::io::Interest;
use tokio::net::unix::pipe;

/// Whether this process's stdin and stdout can be handed over: both a pipe or a socket.
pub(super) fn possible() -> bool {
    let handable = |fd: std::os::fd::BorrowedFd<'_>| {
        rustix::fs::fstat(fd)
            .map(|stat| matches!(FileType::from_raw_mode(stat.st_mode), FileType::Fifo | FileType::Socket))
            .unwrap_or(false)
    };
    handable(io::stdin().as_fd()) && handable(io::stdout().as_fd())
}

/// Sends this process's stdin and stdout over `socket`, with one byte (a message with rights
/// must carry data).
pub(super) fn send(socket: &std::os::unix::net::UnixStream) -> io::Result<()> {
    let (stdin, stdout) = (io::stdin(), io::stdout());
    let fds = [stdin.as_fd(), stdout.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for two descriptors in a control message"));
    }
    let sent = rustix::net::sendmsg(socket, &[IoSlice::new(b"s")], &mut control, SendFlags::empty())?;
    if sent != 1 {
        return Err(io::Error::other("the handover's byte was not sent"));
    }
    Ok(())
}

/// The client's stdin and stdout, received on `socket`: what the server serves MCP over.
pub(super) async fn receive(socket: &tokio::net::UnixStream) -> io::Result<(pipe::Receiver, pipe::Sender)> {
    let (stdin, stdout) = loop {
        socket.readable().await?;
        match socket.try_io(Interest::READABLE, || receive_now(socket)) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            received => break received?,
        }
    };
    // Tokio's readers read until the descriptor would block: a blocking one stalls a runtime
    // worker in read(2) until the client writes, and the runtime cannot shut down meanwhile.
    // The flag is on the open file description `serve` shares, which no longer uses it.
    for fd in [&stdin, &stdout] {
        rustix::io::ioctl_fionbio(fd, true)?;
    }
    // Unchecked: the client checked they are pipes or sockets, which both read and write as
    // a pipe does; the checked constructors refuse a socket.
    Ok((pipe::Receiver::from_owned_fd_unchecked(stdin)?, pipe::Sender::from_owned_fd_unchecked(stdout)?))
}

fn receive_now(socket: &tokio::net::UnixStream) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received =
        rustix::net::recvmsg(socket, &mut [IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if received.bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the client left before handing its stdio over"));
    }
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(stdin), Some(stdout), None) => Ok((stdin, stdout)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "the handover did not carry exactly stdin and stdout")),
    }
}
