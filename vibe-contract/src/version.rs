//! Blender versions as the kernel reports them and registries bound them.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Blender version `major.minor.patch` (`"5.0.1"`, `"3.4.1"`; `"4.2"` reads as `4.2.0`).
///
/// Blender's own strings may carry a suffix (`"4.2.3 LTS"`, `"3.4.1 (sub 0)"`); everything after
/// the numbers is ignored.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct BlenderVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl BlenderVersion {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> BlenderVersion {
        BlenderVersion {
            major,
            minor,
            patch,
        }
    }

    /// Whether the version lies in `[min, max]` (`max` inclusive and optional).
    pub fn within(self, min: BlenderVersion, max: Option<BlenderVersion>) -> bool {
        self >= min && max.is_none_or(|max| self <= max)
    }
}

impl fmt::Display for BlenderVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for BlenderVersion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let head = text.split_whitespace().next().unwrap_or("");
        let mut parts = head.split('.');
        let mut next = |required: bool| -> Result<u32, String> {
            match parts.next() {
                Some(part) => part
                    .parse::<u32>()
                    .map_err(|_| format!("Blender version {text:?} is not major.minor[.patch]")),
                None if required => Err(format!(
                    "Blender version {text:?} is not major.minor[.patch]"
                )),
                None => Ok(0),
            }
        };
        let version = BlenderVersion::new(next(true)?, next(true)?, next(false)?);
        if parts.next().is_some() {
            return Err(format!(
                "Blender version {text:?} has more than three parts"
            ));
        }
        Ok(version)
    }
}

impl TryFrom<String> for BlenderVersion {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<BlenderVersion> for String {
    fn from(version: BlenderVersion) -> String {
        version.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_blender_spellings() {
        assert_eq!(
            "5.0.1".parse::<BlenderVersion>().unwrap(),
            BlenderVersion::new(5, 0, 1)
        );
        assert_eq!(
            "4.2 LTS".parse::<BlenderVersion>().unwrap(),
            BlenderVersion::new(4, 2, 0)
        );
        assert!("five".parse::<BlenderVersion>().is_err());
        assert!("1.2.3.4".parse::<BlenderVersion>().is_err());
        let v = BlenderVersion::new(3, 4, 1);
        assert!(v.within(BlenderVersion::new(3, 4, 0), None));
        assert!(!v.within(BlenderVersion::new(4, 0, 0), None));
        assert!(!v.within(
            BlenderVersion::new(2, 8, 0),
            Some(BlenderVersion::new(3, 3, 99))
        ));
    }
}
