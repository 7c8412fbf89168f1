//! The PNG MockBlender's `render.still` writes into the sandbox: a real file of the asked size
//! (one flat colour; uncompressed deflate blocks), so that the bridge's image return and an MCP
//! client's image block are exercised without Blender.

/// The bytes of a `width` x `height` RGB PNG of one colour.
pub(crate) fn solid_png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    // Each row: a filter byte (0: none), then the pixels.
    let mut row = vec![0u8];
    row.extend(rgb.iter().copied().cycle().take(3 * width as usize));
    let raw = row.repeat(height as usize);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]); // 8 bits, truecolour, deflate, no filter set, no interlace
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib_stored(&raw));
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksums_are_the_standard_ones() {
        // Check values from the CRC-32 and Adler-32 definitions ("123456789" and "Wikipedia").
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let zlib = zlib_stored(b"Wikipedia");
        assert_eq!(&zlib[zlib.len() - 4..], &0x11e6_0398u32.to_be_bytes());
    }

    #[test]
    fn the_file_is_a_png_of_the_asked_size() {
        let png = solid_png(320, 240, [128, 128, 128]);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 320);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 240);
        assert!(
            png.ends_with(&[0xae, 0x42, 0x60, 0x82]),
            "IEND's CRC closes the file"
        );
    }
}
