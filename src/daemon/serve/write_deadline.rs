//! A connection whose writes make no progress for a while is closed: a
//! client that stops reading (a live stream it never reads, an answer it
//! never takes) would otherwise hold its connection, its stream's place and
//! what is queued for it for as long as it likes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, failing a write (or flush) that has been pending for `limit`
/// with `TimedOut`; hyper then closes the connection.
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed while a write is pending; reset by any progress.
    stuck: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            limit,
            stuck: None,
        }
    }

    /// What a pending write or flush becomes: still pending, or timed out
    /// once it has been pending for the limit.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stuck
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the peer took nothing for {}s: closing the connection",
                    limit.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        r: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            done => {
                self.stuck = None;
                done
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progressed(r, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progressed(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progressed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_reads_is_cut_off_at_the_limit() {
        // A pipe that holds 1 KiB: once full, writes wait for a reader that
        // never comes.
        let (client, server) = tokio::io::duplex(1024);
        let mut w = WriteDeadline::new(server, Duration::from_secs(30));
        let started = Instant::now();
        let chunk = [b'x'; 256];
        let e = loop {
            if let Err(e) = w.write_all(&chunk).await {
                break e;
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed().as_secs(), 30);
        drop(client);
    }

    /// The limit counts from the last progress, not from the first wait.
    #[tokio::test(start_paused = true)]
    async fn the_limit_counts_from_the_last_progress() {
        let (mut client, server) = tokio::io::duplex(256);
        let mut w = WriteDeadline::new(server, Duration::from_secs(30));
        w.write_all(&[b'x'; 256]).await.unwrap();
        let writer = tokio::spawn(async move {
            let started = Instant::now();
            let e = loop {
                if let Err(e) = w.write_all(&[b'y'; 64]).await {
                    break e;
                }
            };
            (e.kind(), started.elapsed().as_secs())
        });
        // One read 20 s in: progress, then nothing more.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let mut buf = [0u8; 64];
        tokio::io::AsyncReadExt::read(&mut client, &mut buf)
            .await
            .unwrap();
        let (kind, after) = writer.await.unwrap();
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert_eq!(after, 50, "30 s after the progress at 20 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_up_is_not() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut w = WriteDeadline::new(server, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let mut got = 0;
            while got < 64 * 1024 {
                // Reads a little every 20 s: slower than the writer, never
                // idle for the limit.
                tokio::time::sleep(Duration::from_secs(20)).await;
                got += tokio::io::AsyncReadExt::read(&mut client, &mut buf)
                    .await
                    .unwrap();
            }
        });
        for _ in 0..16 {
            w.write_all(&[b'y'; 256]).await.unwrap();
        }
        reader.abort();
    }
}
