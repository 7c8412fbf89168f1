//! Codec and frame properties.

use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::json;
use tokio_util::codec::Decoder;
use vibe_errors::Envelope;
use vibe_transport::{CodecError, Frame, FrameError, LineCodec};

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (
            1u64..1_000_000,
            "[a-z]{1,8}\\.[a-z_]{1,10}",
            "[ -~é]{0,40}",
            1u64..60_000
        )
            .prop_map(|(id, tool, text, deadline_ms)| Frame::Call {
                id,
                tool,
                params: json!({"name": text, "n": id}),
                deadline_ms
            }),
        (1u64..1_000_000, "[ -~]{0,60}").prop_map(|(id, text)| Frame::Result {
            id,
            envelope: Envelope::ok(json!({"text": text}))
        }),
        (1u64..1_000_000).prop_map(|id| Frame::Cancel { id }),
        Just(Frame::Bye),
    ]
}

/// Decodes `bytes` fed in the given chunk sizes.
fn decode_chunked(bytes: &[u8], cuts: &[usize], max: usize) -> Result<Vec<Frame>, String> {
    let mut codec = LineCodec::new(max);
    let mut buffer = BytesMut::new();
    let mut frames = Vec::new();
    let mut rest = bytes;
    let mut cut_iter = cuts.iter().cycle();
    while !rest.is_empty() {
        let n = (*cut_iter.next().unwrap_or(&1)).clamp(1, rest.len());
        buffer.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        while let Some(line) = codec.decode(&mut buffer).map_err(|e| e.to_string())? {
            frames.push(Frame::parse(&line).map_err(|e| e.to_string())?);
        }
    }
    Ok(frames)
}

proptest! {
    #[test]
    fn frames_split_anywhere_decode_the_same(frames in prop::collection::vec(frame(), 1..12), cuts in prop::collection::vec(1usize..64, 1..16)) {
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::to_line).collect();
        let decoded = decode_chunked(&bytes, &cuts, 1 << 20).unwrap();
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn an_oversized_frame_errors_before_it_is_buffered(len in 200usize..5_000, chunk in 1usize..97) {
        let max = 128;
        let mut codec = LineCodec::new(max);
        let mut buffer = BytesMut::new();
        let line = vec![b'x'; len];
        let mut fed = 0;
        let error = loop {
            let n = chunk.min(len - fed);
            buffer.extend_from_slice(&line[fed..fed + n]);
            fed += n;
            match codec.decode(&mut buffer) {
                Err(e) => break e,
                Ok(None) => prop_assert!(fed < len, "no error after the whole oversized line"),
                Ok(Some(_)) => prop_assert!(false, "an oversized line decoded"),
            }
        };
        let too_large = matches!(error, CodecError::FrameTooLarge { max: 128 });
        prop_assert!(too_large);
        // The error comes as soon as the buffer passes the maximum, not after the whole line.
        prop_assert!(fed <= max + chunk);
    }

    #[test]
    fn garbage_lines_are_protocol_errors(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let line: Vec<u8> = bytes.into_iter().filter(|b| *b != b'\n').collect();
        match Frame::parse(&line) {
            Ok(frame) => prop_assert!(line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'), "{frame:?}"),
            Err(FrameError::NotUtf8 | FrameError::NotAnObject(_) | FrameError::Invalid(_)) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}

#[test]
fn invalid_utf8_and_non_objects_are_refused() {
    assert_eq!(
        Frame::parse(b"{\"type\":\"bye\"\xff}"),
        Err(FrameError::NotUtf8)
    );
    for line in [&b"42"[..], b"\"hello\"", b"[]", b"null", b""] {
        assert!(
            matches!(Frame::parse(line), Err(FrameError::NotAnObject(_))),
            "{line:?}"
        );
    }
}

#[test]
fn crlf_and_exact_maximum() {
    let mut codec = LineCodec::new(10);
    let mut buffer = BytesMut::from(&b"0123456789\r\n0123456789X\n"[..]);
    // "0123456789\r" is 11 bytes before the newline: over the maximum of 10.
    assert!(codec.decode(&mut buffer).is_err());
    let mut codec = LineCodec::new(11);
    let mut buffer = BytesMut::from(&b"0123456789\r\nabc\n"[..]);
    assert_eq!(
        &codec.decode(&mut buffer).unwrap().unwrap()[..],
        b"0123456789"
    );
    assert_eq!(&codec.decode(&mut buffer).unwrap().unwrap()[..], b"abc");
}
