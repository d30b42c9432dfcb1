//! An incremental Server-Sent-Events decoder.
//!
//! Both wire formats stream SSE, and the network splits it anywhere: mid-line, between `\r`
//! and `\n`, even inside a multi-byte UTF-8 character. The decoder therefore buffers raw bytes
//! and only turns *complete lines* into text; a line terminator byte can never occur inside a
//! UTF-8 sequence, so every complete line is whole UTF-8 no matter how the bytes were chunked.
//!
//! Follows the WHATWG event-stream rules we need (`event:`, multi-line `data:`, `:` comments,
//! `\r\n` / `\n` / `\r` line ends, one optional space after the colon; `id:` and `retry:` are
//! ignored because we never reconnect at the SSE level). One deliberate leniency: at end of
//! stream a pending event that lacks its terminating blank line is still dispatched, so a
//! server that closes right after `data: [DONE]\n` does not look truncated.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt};

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if the server sent one (Anthropic does, OpenAI does not).
    pub event: Option<String>,
    /// All `data:` lines of the event joined with `\n`.
    pub data: String,
}

/// The byte-level state machine. Feed it chunks with [`SseDecoder::push`]; call
/// [`SseDecoder::finish`] at end of stream.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    buf: Vec<u8>,
    event: Option<String>,
    data: String,
    /// Whether any `data:` line was seen for the pending event (an empty `data:` still counts).
    has_data: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes one chunk and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            match self.buf[i] {
                b'\n' => {
                    self.take_line(start, i, &mut out);
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    // A `\r` as the last buffered byte may be the first half of `\r\n`: wait
                    // for the next chunk before deciding where the line ends.
                    if i + 1 == self.buf.len() {
                        break;
                    }
                    self.take_line(start, i, &mut out);
                    i += if self.buf[i + 1] == b'\n' { 2 } else { 1 };
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.buf.drain(..start);
        out
    }

    /// Ends the stream: a trailing unterminated line and a pending event are dispatched.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let end = if self.buf.last() == Some(&b'\r') { self.buf.len() - 1 } else { self.buf.len() };
            self.take_line(0, end, &mut out);
            self.buf.clear();
        }
        self.dispatch(&mut out);
        out.pop()
    }

    fn take_line(&mut self, start: usize, end: usize, out: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
        self.process_line(&line, out);
    }

    fn process_line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry, unknown fields
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            // Per the SSE rules an event without data is not dispatched (and its name is reset).
            return;
        }
        self.has_data = false;
        out.push(SseEvent { event: event.filter(|e| !e.is_empty()), data: std::mem::take(&mut self.data) });
    }
}

/// Decodes a byte stream (e.g. `reqwest::Response::bytes_stream`) into SSE events. A transport
/// error is passed through and ends the stream.
pub fn decode<S, E>(bytes: S) -> impl Stream<Item = Result<SseEvent, E>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Send + 'static,
{
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        decoder: SseDecoder,
        ready: VecDeque<SseEvent>,
        done: bool,
    }
    let state = State { bytes: Box::pin(bytes), decoder: SseDecoder::new(), ready: VecDeque::new(), done: false };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.ready.pop_front() {
                return Some((Ok(event), st));
            }
            if st.done {
                return None;
            }
            match st.bytes.next().await {
                Some(Ok(chunk)) => st.ready.extend(st.decoder.push(&chunk)),
                Some(Err(err)) => {
                    st.done = true;
                    return Some((Err(err), st));
                }
                None => {
                    st.done = true;
                    st.ready.extend(st.decoder.finish());
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: event.map(str::to_owned), data: data.to_owned() }
    }

    /// Feeds `input` split at the given byte offsets and collects every event.
    fn decode_split(input: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let mut prev = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            out.extend(decoder.push(&input[prev..cut]));
            prev = cut;
        }
        out.extend(decoder.finish());
        out
    }

    const SAMPLE: &str = "event: message_start\r\ndata: {\"a\":\"é€😀\"}\r\n\r\n: keep-alive comment\n\nevent: delta\ndata: line one\ndata:line two\ndata: \n\ndata: [DONE]\n\n";

    fn sample_expected() -> Vec<SseEvent> {
        vec![
            ev(Some("message_start"), "{\"a\":\"é€😀\"}"),
            ev(Some("delta"), "line one\nline two\n"),
            ev(None, "[DONE]"),
        ]
    }

    #[test]
    fn whole_input_at_once() {
        assert_eq!(decode_split(SAMPLE.as_bytes(), &[]), sample_expected());
    }

    #[test]
    fn every_single_split_point() {
        // Covers splits mid-line, between \r and \n, and inside every multi-byte character.
        let bytes = SAMPLE.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(decode_split(bytes, &[cut]), sample_expected(), "split at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let bytes = SAMPLE.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode_split(bytes, &cuts), sample_expected());
    }

    #[test]
    fn random_chunkings() {
        let bytes = SAMPLE.as_bytes();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..500 {
            let mut cuts: Vec<usize> = (0..rng.usize(1..8)).map(|_| rng.usize(0..=bytes.len())).collect();
            cuts.sort_unstable();
            assert_eq!(decode_split(bytes, &cuts), sample_expected(), "cuts {cuts:?}");
        }
    }

    #[test]
    fn lone_cr_line_endings() {
        let input = b"event: x\rdata: 1\r\rdata: 2\r\r";
        assert_eq!(decode_split(input, &[9]), vec![ev(Some("x"), "1"), ev(None, "2")]);
    }

    #[test]
    fn event_name_without_data_is_dropped_and_reset() {
        let input = b"event: ping\n\ndata: x\n\n";
        assert_eq!(decode_split(input, &[]), vec![ev(None, "x")]);
    }

    #[test]
    fn field_without_colon_and_only_one_space_stripped() {
        let input = b"data\ndata:  two spaces\nid: 5\nretry: 10\n\n";
        assert_eq!(decode_split(input, &[]), vec![ev(None, "\n two spaces")]);
    }

    #[test]
    fn unterminated_tail_is_dispatched_at_eof() {
        assert_eq!(decode_split(b"data: [DONE]", &[]), vec![ev(None, "[DONE]")]);
        assert_eq!(decode_split(b"data: [DONE]\r", &[]), vec![ev(None, "[DONE]")]);
        assert_eq!(decode_split(b"data: [DONE]\n", &[]), vec![ev(None, "[DONE]")]);
        assert_eq!(decode_split(b": only a comment", &[]), vec![]);
    }

    #[tokio::test]
    async fn stream_adapter_passes_errors_through_and_stops() {
        let chunks: Vec<Result<Bytes, &'static str>> = vec![
            Ok(Bytes::from_static(b"data: a\n")),
            Ok(Bytes::from_static(b"\ndata: b")),
            Err("boom"),
            Ok(Bytes::from_static(b"\n\ndata: never\n\n")),
        ];
        let out: Vec<_> = decode(stream::iter(chunks)).collect().await;
        assert_eq!(out, vec![Ok(ev(None, "a")), Err("boom")]);
    }

    #[tokio::test]
    async fn stream_adapter_flushes_at_eof() {
        // "é" is 0xC3 0xA9: the chunk boundary falls inside it and no newline ever comes.
        let bytes = "data: h\u{e9}".as_bytes();
        let chunks: Vec<Result<Bytes, ()>> =
            vec![Ok(Bytes::copy_from_slice(&bytes[..8])), Ok(Bytes::copy_from_slice(&bytes[8..]))];
        let out: Vec<_> = decode(stream::iter(chunks)).collect().await;
        assert_eq!(out, vec![Ok(ev(None, "hé"))]);
    }
}
