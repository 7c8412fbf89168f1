//! The MCP `tools/call` result shape, as plain JSON.
//!
//! MCP hosts receive an envelope as a `tools/call` result whose `structuredContent` is the
//! envelope, whose one text block carries the same JSON, and whose `isError` is `!ok`. Argument
//! errors are tool errors (a result with `isError: true`), not JSON-RPC errors, so the model sees
//! them and can correct itself. No MCP crate is needed for this.

use serde_json::{Value, json};

use crate::envelope::Envelope;
use crate::image::take_image_data;

impl Envelope {
    /// The envelope as an MCP `tools/call` result.
    ///
    /// ```
    /// use vibe_errors::Envelope;
    /// let result = Envelope::ok(serde_json::json!({"name": "Cube"})).to_mcp_tool_result();
    /// assert_eq!(result["isError"], false);
    /// assert_eq!(result["structuredContent"]["result"]["name"], "Cube");
    /// ```
    ///
    /// An answer with an image (`_meta.image`, a render) adds an `image` content block with its
    /// bytes; the envelope's text and `structuredContent` then keep the image's type and size
    /// without the bytes, which travel once.
    pub fn to_mcp_tool_result(&self) -> Value {
        let mut envelope = self.to_value();
        let image = take_image_data(&mut envelope).map(|data| {
            let mime_type = envelope.pointer("/result/_meta/image/mime_type").cloned();
            json!({"type": "image", "data": data, "mimeType": mime_type})
        });
        let text = serde_json::to_string(&envelope).unwrap_or_default();
        let mut content = vec![json!({ "type": "text", "text": text })];
        content.extend(image);
        json!({
            "content": content,
            "structuredContent": envelope,
            "isError": !self.is_ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Image, Meta};

    #[test]
    fn an_image_is_one_content_block_of_its_own() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&64u32.to_be_bytes());
        png.extend_from_slice(&48u32.to_be_bytes());
        let meta = Meta {
            image: Some(Image::png(png.clone()).unwrap()),
            ..Meta::default()
        };
        let envelope = Envelope::ok(json!({"path": "a.png"})).with_meta(meta);
        let result = envelope.to_mcp_tool_result();
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 2);
        assert_eq!(content[1]["type"], "image");
        assert_eq!(content[1]["mimeType"], "image/png");
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(content[1]["data"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, png);
        let meta = &result["structuredContent"]["result"]["_meta"]["image"];
        assert_eq!(
            (meta["width"].as_u64(), meta["height"].as_u64()),
            (Some(64), Some(48))
        );
        assert!(meta.get("data").is_none(), "the bytes travel once");
        assert!(!content[0]["text"].as_str().unwrap().contains("iVBOR"));
    }
}
