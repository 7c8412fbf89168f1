//! The result verifier: declarative expectations checked with read-back tools, with a
//! confidence score (seed 004's ResultVerifier, without guessing from prose).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::pipeline::Pipeline;

/// One thing the scene should show after a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "expect")]
pub enum Expectation {
    /// An object of this name exists.
    ObjectExists {
        /// The object.
        name: String,
    },
    /// No object of this name exists.
    ObjectAbsent {
        /// The object.
        name: String,
    },
    /// The object's location is within `tolerance` of `location` on every axis.
    Location {
        /// The object.
        name: String,
        /// Where it should be.
        location: [f64; 3],
        /// How far off it may be.
        tolerance: f64,
    },
    /// The object has this type (`MESH`, `LIGHT`, ...).
    Type {
        /// The object.
        name: String,
        /// The type.
        object_type: String,
    },
    /// The object has this material in a slot.
    Material {
        /// The object.
        name: String,
        /// The material.
        material: String,
    },
    /// The scene has exactly this many objects (of a type, if given).
    Count {
        /// The type, or all objects.
        object_type: Option<String>,
        /// How many.
        equals: usize,
    },
}

/// One expectation's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The expectation.
    pub expectation: Expectation,
    /// Whether it held.
    pub passed: bool,
    /// What was found.
    pub observed: Value,
}

/// All results, and the share that held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// Every check.
    pub checks: Vec<Check>,
    /// Passed checks / all checks (1.0 for none).
    pub confidence: f64,
}

/// Checks expectations through the pipeline's read tools.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResultVerifier;

impl ResultVerifier {
    /// Checks every expectation (reads only).
    pub async fn verify(&self, pipeline: &Pipeline, expectations: &[Expectation]) -> Verification {
        let mut checks = Vec::with_capacity(expectations.len());
        // The registry says which agreed tools read one object and list them.
        let agreement = &pipeline.session().agreement;
        let lookup = agreement.lookup_tool().unwrap_or_default().to_owned();
        let listing = agreement.listing_tool().unwrap_or_default().to_owned();
        for expectation in expectations {
            let (passed, observed) = match expectation {
                Expectation::ObjectExists { name } | Expectation::ObjectAbsent { name } => {
                    let info = pipeline.call(&lookup, json!({"name": name})).await;
                    let exists = info.is_ok();
                    (
                        exists == matches!(expectation, Expectation::ObjectExists { .. }),
                        json!({"exists": exists}),
                    )
                }
                Expectation::Location {
                    name,
                    location,
                    tolerance,
                } => {
                    let info = pipeline.call(&lookup, json!({"name": name})).await;
                    let found = info
                        .result()
                        .map(|r| r["location"].clone())
                        .unwrap_or(Value::Null);
                    let close = found.as_array().is_some_and(|a| {
                        a.len() == 3
                            && a.iter().zip(location).all(|(f, w)| {
                                f.as_f64().is_some_and(|f| (f - w).abs() <= *tolerance)
                            })
                    });
                    (close, found)
                }
                Expectation::Type { name, object_type } => {
                    let info = pipeline.call(&lookup, json!({"name": name})).await;
                    let found = info
                        .result()
                        .map(|r| r["type"].clone())
                        .unwrap_or(Value::Null);
                    (found == json!(object_type), found)
                }
                Expectation::Material { name, material } => {
                    let info = pipeline.call(&lookup, json!({"name": name})).await;
                    let found = info
                        .result()
                        .map(|r| r["materials"].clone())
                        .unwrap_or(Value::Null);
                    (
                        found
                            .as_array()
                            .is_some_and(|m| m.iter().any(|x| x == material)),
                        found,
                    )
                }
                Expectation::Count {
                    object_type,
                    equals,
                } => {
                    let params = object_type
                        .as_ref()
                        .map_or(json!({}), |t| json!({"type": t}));
                    let listed = pipeline.call(&listing, params).await;
                    let count = listed
                        .result()
                        .and_then(|r| r["objects"].as_array().map(Vec::len))
                        .unwrap_or(0);
                    (count == *equals, json!(count))
                }
            };
            checks.push(Check {
                expectation: expectation.clone(),
                passed,
                observed,
            });
        }
        let passed = checks.iter().filter(|c| c.passed).count();
        let confidence = if checks.is_empty() {
            1.0
        } else {
            passed as f64 / checks.len() as f64
        };
        Verification { checks, confidence }
    }
}

impl Pipeline {
    /// Runs a call through every phase, then checks `expectations` with read-backs (the
    /// verify phase of seed 001 with declared expectations). The verification is skipped (empty,
    /// confidence 0) when the call failed.
    pub async fn call_and_verify(
        &self,
        tool: &str,
        params: Value,
        expectations: &[Expectation],
    ) -> (vibe_errors::Envelope, Verification) {
        let envelope = self.call(tool, params).await;
        if !envelope.is_ok() {
            return (
                envelope,
                Verification {
                    checks: Vec::new(),
                    confidence: 0.0,
                },
            );
        }
        let verification = ResultVerifier.verify(self, expectations).await;
        (envelope, verification)
    }
}
