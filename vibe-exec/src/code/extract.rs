//! Code extraction from model output: the fenced Python block, or an E2 format failure.

/// Why no code could be taken from a model's output (failure class E2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("format failure: {0}")]
pub struct FormatFailure(pub String);

/// The code of the first ```` ```python ```` (or `py`) block, else of the first untagged fenced
/// block. Prose without a fenced block is a [`FormatFailure`].
pub fn extract_code(output: &str) -> Result<String, FormatFailure> {
    let mut untagged = None;
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        let Some(tag) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let tag = tag.trim().to_ascii_lowercase();
        let mut body = Vec::new();
        let mut closed = false;
        for inner in lines.by_ref() {
            if inner.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            body.push(inner);
        }
        if !closed {
            return Err(FormatFailure(
                "a code fence was opened and never closed".into(),
            ));
        }
        let code = body.join("\n");
        if matches!(tag.as_str(), "python" | "py" | "python3") {
            return non_empty(code);
        }
        if tag.is_empty() && untagged.is_none() {
            untagged = Some(code);
        }
    }
    match untagged {
        Some(code) => non_empty(code),
        None => Err(FormatFailure(
            "no fenced code block: return the code in a ```python block".into(),
        )),
    }
}

fn non_empty(code: String) -> Result<String, FormatFailure> {
    if code.trim().is_empty() {
        Err(FormatFailure("the code block is empty".into()))
    } else {
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences() {
        assert_eq!(
            extract_code("Here:\n```python\nimport bpy\nprint(1)\n```\nDone.").unwrap(),
            "import bpy\nprint(1)"
        );
        assert_eq!(extract_code("```\nx = 1\n```").unwrap(), "x = 1");
        assert_eq!(
            extract_code("```text\nno\n```\n```py\nyes = 1\n```").unwrap(),
            "yes = 1"
        );
        assert!(extract_code("I moved the cube for you.").is_err());
        assert!(extract_code("```python\nunclosed").is_err());
        assert!(extract_code("```python\n\n```").is_err());
    }
}
