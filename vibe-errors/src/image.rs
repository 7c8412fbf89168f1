//! An image returned with an answer, so that the agent sees what it made: a render the kernel
//! wrote into the session's sandbox, read back by the bridge and carried in `_meta.image`
//! (its bytes base64 in JSON; an MCP server sends it as an image content block).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most bytes of an image returned with an answer; a larger file stays in the sandbox only.
pub const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
/// The widest and tallest image returned with an answer, in pixels.
pub const MAX_IMAGE_SIDE: u32 = 4096;

const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// An image: its type, size and bytes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Image {
    /// `image/png`.
    pub mime_type: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The file's bytes (base64 in JSON).
    #[serde(serialize_with = "to_base64", deserialize_with = "from_base64")]
    #[schemars(with = "String")]
    pub data: Vec<u8>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Image")
            .field("mime_type", &self.mime_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl Image {
    /// A PNG from its file's bytes: the signature and the header's size are checked against
    /// [`MAX_IMAGE_BYTES`] and [`MAX_IMAGE_SIDE`]; the error says why it is not returned.
    pub fn png(data: Vec<u8>) -> Result<Image, String> {
        if data.len() > MAX_IMAGE_BYTES {
            return Err(format!(
                "{} bytes, over MAX_IMAGE_BYTES = {MAX_IMAGE_BYTES}",
                data.len()
            ));
        }
        // The signature, then the IHDR chunk: length, "IHDR", width, height (big-endian).
        if data.len() < 24 || &data[..8] != PNG_SIGNATURE || &data[12..16] != b"IHDR" {
            return Err("not a PNG file".into());
        }
        let side =
            |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let (width, height) = (side(16), side(20));
        if width == 0 || height == 0 || width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
            return Err(format!(
                "{width} x {height} pixels, outside 1-{MAX_IMAGE_SIDE} per side"
            ));
        }
        Ok(Image {
            mime_type: "image/png".into(),
            width,
            height,
            data,
        })
    }

    /// The bytes as base64 (MCP's image content block carries them so).
    pub fn base64(&self) -> String {
        STANDARD.encode(&self.data)
    }
}

/// Takes the bytes (base64) of the image out of an envelope's JSON (`result._meta.image.data`),
/// leaving its type and size: for the places that carry or keep the image otherwise (an MCP
/// image block) or not at all (the audit log).
pub fn take_image_data(envelope: &mut serde_json::Value) -> Option<String> {
    match envelope
        .pointer_mut("/result/_meta/image")?
        .as_object_mut()?
        .remove("data")?
    {
        serde_json::Value::String(data) => Some(data),
        _ => None,
    }
}

fn to_base64<S: Serializer>(data: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&STANDARD.encode(data))
}

fn from_base64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(deserializer)?;
    STANDARD.decode(text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG header of `width` x `height` (the rest of the file does not matter to the check).
    fn header(width: u32, height: u32) -> Vec<u8> {
        let mut data = PNG_SIGNATURE.to_vec();
        data.extend_from_slice(&13u32.to_be_bytes());
        data.extend_from_slice(b"IHDR");
        data.extend_from_slice(&width.to_be_bytes());
        data.extend_from_slice(&height.to_be_bytes());
        data.extend_from_slice(&[8, 2, 0, 0, 0]);
        data
    }

    #[test]
    fn pngs_are_read_and_bounded() {
        let image = Image::png(header(320, 240)).unwrap();
        assert_eq!(
            (image.width, image.height, image.mime_type.as_str()),
            (320, 240, "image/png")
        );
        assert!(Image::png(header(MAX_IMAGE_SIDE + 1, 10)).is_err());
        assert!(Image::png(header(0, 10)).is_err());
        assert!(Image::png(b"GIF89a not a png at all....".to_vec()).is_err());
        let mut big = header(10, 10);
        big.resize(MAX_IMAGE_BYTES + 1, 0);
        assert!(Image::png(big).unwrap_err().contains("MAX_IMAGE_BYTES"));
    }

    #[test]
    fn the_bytes_travel_as_base64() {
        let image = Image::png(header(2, 3)).unwrap();
        let json = serde_json::to_value(&image).unwrap();
        // The base64 of the signature's first bytes, as any encoder writes it.
        assert!(json["data"].as_str().unwrap().starts_with("iVBORw0KGgo"));
        assert_eq!(serde_json::from_value::<Image>(json).unwrap(), image);
    }
}
