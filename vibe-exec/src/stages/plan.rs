//! Phase 3: pre-flight reads without side effects.

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_contract::{MODIFIER_DEFAULTS, polygon_estimate};
use vibe_errors::{ErrorBody, Reason};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// Before `modifier.add`, reads the object and refuses a modifier that would take it past the
/// contract's polygon budget.
#[derive(Debug, Default)]
pub struct PolygonBudget;

fn estimated_polygons(info: &Value) -> u64 {
    let base = info["data"]["polygons"].as_u64().unwrap_or(0);
    info["modifiers"]
        .as_array()
        .into_iter()
        .flatten()
        .fold(base, |p, m| {
            let levels = m["levels"]
                .as_u64()
                .unwrap_or(0)
                .max(m["render_levels"].as_u64().unwrap_or(0)) as u32;
            polygon_estimate(
                p,
                m["type"].as_str().unwrap_or(""),
                levels,
                m["count"].as_u64().unwrap_or(1) as u32,
                m["segments"].as_u64().unwrap_or(1) as u32,
            )
        })
}

#[async_trait]
impl Stage for PolygonBudget {
    fn phase(&self) -> Phase {
        Phase::Plan
    }
    fn name(&self) -> &'static str {
        "polygon_budget"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.has_check(vibe_contract::BridgeCheck::PolygonBudget) {
            return Ok(());
        }
        let (Some(name), Some(lookup)) = (
            call.str_param("name").map(str::to_owned),
            session.agreement.lookup_tool(),
        ) else {
            return Ok(());
        };
        call.transport_calls += 1;
        // A failed read is not a refusal: the kernel checks again and answers for itself.
        let Ok(answer) = session
            .read(lookup, json!({"name": name}), call.deadline, &call.cancel)
            .await
        else {
            return Ok(());
        };
        let Some(info) = answer.result() else {
            return Ok(());
        };
        let kind = call.str_param("modifier_type").unwrap_or("");
        let (levels, render_levels, count, segments) = MODIFIER_DEFAULTS;
        let param = |key: &str, default: u32| {
            call.params
                .get(key)
                .and_then(Value::as_u64)
                .map_or(default, |v| v as u32)
        };
        let levels = call
            .params
            .get("levels")
            .and_then(Value::as_u64)
            .map_or(levels.max(render_levels), |v| v as u32);
        let estimate = polygon_estimate(
            estimated_polygons(info),
            kind,
            levels,
            param("count", count),
            param("segments", segments),
        );
        let budget = session.agreement.contract.constraints.sanity.max_polygons;
        if estimate > budget {
            return Err(ErrorBody::from_reason(Reason::SanityLimit, format!("the modifier would give {name:?} about {estimate} polygons, over the budget of {budget}"))
                .with_detail("field", "modifier_type")
                .with_detail("limit", budget)
                .with_detail("estimate", estimate));
        }
        Ok(())
    }
}
