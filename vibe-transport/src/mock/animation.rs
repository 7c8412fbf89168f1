//! Keyframe animation in MockBlender's data model: keys on an object's properties (its
//! transforms, a camera's lens, a light's energy and colour), the scene's timeline, and F-curve
//! evaluation with Blender's arithmetic.
//!
//! Blender keeps a camera's or light's keys on its data-block's own action; the mock keeps them
//! with the object's (in [`Object::animation`], under the same property names), which is the
//! same thing while every object has its own data (the mock's cameras and lights do).
//!
//! Evaluation follows Blender's F-curves with constant extrapolation (before the first key its
//! value, from the last key on its value, at a key exactly its value) and, between two keys, the
//! earlier key's interpolation:
//!
//! * `CONSTANT`: the earlier key's value - exact.
//! * `LINEAR`: `change * time / duration + begin` in 32-bit floats, Blender's own expression
//!   and order of operations - exact, bit for bit.
//! * `BEZIER`: the curve between two keys whose auto-clamped handles are flat, a third of the
//!   interval long (Blender's default continuous-acceleration smoothing): x is linear in t, so
//!   `y = y0 + (y1 - y0) * (3t^2 - 2t^3)` with `t` the fraction of the interval. Computed in
//!   64 bits and stored as a 32-bit float, it agrees with Blender's 32-bit solver to about one
//!   unit in the last place: to 1e-6 (the scenarios' rounding) for values of magnitude ~1, e.g.
//!   keys 1 and 2 at frames 1 and 24 at every frame between; keys 0 and 24 give 11.217884 at
//!   frame 12 as Blender does. Handles are flat for both keys of a two-key curve and for a key
//!   that is an extreme of its neighbours, so the formula is the curve there; a key on a slope
//!   of a 3+-key curve has sloped handles, which this model does not compute (an approximation).

use crate::mock::scene::{Object, ObjectData, ObjectType};

/// One property that can be keyed: its name (the data path, on the object or on its data), its
/// number of components (1: a scalar, a number on the wire), the type of object whose data holds
/// it, the bounds of every component, and how to read and write it on a mock object. The single
/// list of what can be keyed (the kernel's `PROPERTIES` is its twin).
pub struct Property {
    /// The data path.
    pub name: &'static str,
    /// Number of components.
    pub components: usize,
    /// The type of object whose data holds it; `None` for the object's own transforms.
    pub data_of: Option<ObjectType>,
    /// The lowest value of a component.
    pub low: f64,
    /// The highest value of a component.
    pub high: f64,
    /// The bounds in words, as refusals name them.
    pub bounds: &'static str,
    /// The current value (empty on an object it does not apply to).
    pub get: fn(&Object) -> Vec<f32>,
    /// Sets the value (posing); nothing on an object it does not apply to.
    pub set: fn(&mut Object, &[f32]),
}

impl Property {
    /// Whether it can be keyed on `object`: transforms on every object, data properties on
    /// objects of their type.
    pub fn applies(&self, object: &Object) -> bool {
        self.data_of.is_none_or(|kind| kind == object.kind)
    }
}

fn set3(target: &mut [f32; 3], value: &[f32]) {
    for (slot, v) in target.iter_mut().zip(value) {
        *slot = *v;
    }
}

/// The bound of transform values.
const TRANSFORM_BOUND: f64 = 1.0e6;

/// What can be keyed.
pub const PROPERTIES: [Property; 6] = [
    Property {
        name: "location",
        components: 3,
        data_of: None,
        low: -TRANSFORM_BOUND,
        high: TRANSFORM_BOUND,
        bounds: "within +-1e6",
        get: |o| o.location.to_vec(),
        set: |o, v| set3(&mut o.location, v),
    },
    Property {
        name: "rotation_euler",
        components: 3,
        data_of: None,
        low: -TRANSFORM_BOUND,
        high: TRANSFORM_BOUND,
        bounds: "within +-1e6",
        get: |o| o.rotation.to_vec(),
        set: |o, v| set3(&mut o.rotation, v),
    },
    Property {
        name: "scale",
        components: 3,
        data_of: None,
        low: -TRANSFORM_BOUND,
        high: TRANSFORM_BOUND,
        bounds: "within +-1e6",
        get: |o| o.scale.to_vec(),
        set: |o, v| set3(&mut o.scale, v),
    },
    Property {
        name: "lens",
        components: 1,
        data_of: Some(ObjectType::Camera),
        low: 1.0,
        high: 5000.0,
        bounds: "1 to 5000 (mm)",
        get: |o| match &o.data {
            ObjectData::Camera(c) => vec![c.lens],
            _ => Vec::new(),
        },
        set: |o, v| {
            if let (ObjectData::Camera(c), Some(lens)) = (&mut o.data, v.first()) {
                c.lens = *lens;
            }
        },
    },
    Property {
        name: "energy",
        components: 1,
        data_of: Some(ObjectType::Light),
        low: 0.0,
        high: 1.0e6,
        bounds: "0 to 1e6 (W)",
        get: |o| match &o.data {
            ObjectData::Light(l) => vec![l.energy],
            _ => Vec::new(),
        },
        set: |o, v| {
            if let (ObjectData::Light(l), Some(energy)) = (&mut o.data, v.first()) {
                l.energy = *energy;
            }
        },
    },
    Property {
        name: "color",
        components: 3,
        data_of: Some(ObjectType::Light),
        low: 0.0,
        high: 1.0,
        bounds: "0 to 1 per channel",
        get: |o| match &o.data {
            ObjectData::Light(l) => l.color.to_vec(),
            _ => Vec::new(),
        },
        set: |o, v| {
            if let ObjectData::Light(l) = &mut o.data {
                set3(&mut l.color, v);
            }
        },
    },
];

/// The property of this name.
pub fn property(name: &str) -> Option<&'static Property> {
    PROPERTIES.iter().find(|p| p.name == name)
}

/// A key's interpolation towards the next key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interpolation {
    /// Holds its value until the next key.
    Constant,
    /// A straight line to the next key.
    Linear,
    /// A Bezier curve with auto-clamped handles.
    Bezier,
}

impl Interpolation {
    /// Blender's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Interpolation::Constant => "CONSTANT",
            Interpolation::Linear => "LINEAR",
            Interpolation::Bezier => "BEZIER",
        }
    }

    /// From Blender's spelling.
    pub fn parse(text: &str) -> Option<Interpolation> {
        match text {
            "CONSTANT" => Some(Interpolation::Constant),
            "LINEAR" => Some(Interpolation::Linear),
            "BEZIER" => Some(Interpolation::Bezier),
            _ => None,
        }
    }
}

/// One key: every component of a property at one frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// The frame.
    pub frame: i32,
    /// One value per component, stored as Blender stores them (32-bit floats).
    pub value: Vec<f32>,
    /// Towards the next key.
    pub interpolation: Interpolation,
}

/// The value of component `c` of `keys` (sorted by frame, not empty) at `frame`.
pub fn evaluate_component(keys: &[Key], c: usize, frame: i32) -> f32 {
    let (first, last) = match (keys.first(), keys.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => return 0.0,
    };
    if frame <= first.frame {
        return first.value[c];
    }
    if frame >= last.frame {
        return last.value[c];
    }
    // The last key at or before `frame`, and the one after it.
    let next = keys.partition_point(|k| k.frame <= frame);
    let (a, b) = (&keys[next - 1], &keys[next]);
    if a.frame == frame {
        return a.value[c];
    }
    match a.interpolation {
        Interpolation::Constant => a.value[c],
        Interpolation::Linear => {
            // Blender: BLI_easing_linear_ease(time, begin, change, duration), in floats.
            let begin = a.value[c];
            let change = b.value[c] - a.value[c];
            let duration = b.frame as f32 - a.frame as f32;
            let time = frame as f32 - a.frame as f32;
            change * time / duration + begin
        }
        Interpolation::Bezier => {
            let t = f64::from(frame - a.frame) / f64::from(b.frame - a.frame);
            let (y0, y1) = (f64::from(a.value[c]), f64::from(b.value[c]));
            (y0 + (y1 - y0) * (3.0 * t * t - 2.0 * t * t * t)) as f32
        }
    }
}

/// Every component of `keys` at `frame`.
pub fn evaluate(keys: &[Key], frame: i32) -> Vec<f32> {
    let components = keys.first().map_or(0, |k| k.value.len());
    (0..components)
        .map(|c| evaluate_component(keys, c, frame))
        .collect()
}

/// The scene's timeline, Blender's factory settings by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeline {
    /// The first frame.
    pub frame_start: i32,
    /// The last frame.
    pub frame_end: i32,
    /// Frames per second (`fps_base` 1).
    pub fps: u32,
    /// The current frame.
    pub frame_current: i32,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            frame_start: 1,
            frame_end: 250,
            fps: 24,
            frame_current: 1,
        }
    }
}

/// Poses `object` at `frame`: each keyed property takes its animated value, as Blender's
/// `frame_set` does.
pub fn pose(object: &mut Object, frame: i32) {
    let values: Vec<(&Property, Vec<f32>)> = object
        .animation
        .iter()
        .filter_map(|(name, keys)| property(name).map(|p| (p, evaluate(keys, frame))))
        .collect();
    for (property, value) in values {
        (property.set)(object, &value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(frame: i32, value: f32, interpolation: Interpolation) -> Key {
        Key {
            frame,
            value: vec![value],
            interpolation,
        }
    }

    #[test]
    fn bezier_between_two_keys_is_blenders_figure() {
        let keys = [
            key(1, 0.0, Interpolation::Bezier),
            key(24, 24.0, Interpolation::Bezier),
        ];
        // Blender 3.4 to 5.2: fc.evaluate(12) == 11.217884063720703.
        assert_eq!(evaluate_component(&keys, 0, 12), 11.217_884_f32);
        assert_eq!(evaluate_component(&keys, 0, 1), 0.0);
        assert_eq!(evaluate_component(&keys, 0, 30), 24.0);
    }

    #[test]
    fn bezier_keys_at_extremes_are_two_key_curves() {
        // Blender: keys 0, 1, 0 at frames 1, 11, 21 evaluate to 0.216 at 4 and 0.784 at 14.
        let keys = [
            key(1, 0.0, Interpolation::Bezier),
            key(11, 1.0, Interpolation::Bezier),
            key(21, 0.0, Interpolation::Bezier),
        ];
        assert!((evaluate_component(&keys, 0, 4) - 0.216).abs() < 1e-6);
        assert!((evaluate_component(&keys, 0, 14) - 0.784).abs() < 1e-6);
    }

    proptest::proptest! {
        /// LINEAR and CONSTANT against the textbook formulas in 64 bits: within a 32-bit
        /// rounding of them (the mock computes as Blender does, in 32 bits).
        #[test]
        fn linear_and_constant_match_the_formulas(
            f0 in -1000i32..1000, gap in 1i32..500, y0 in -1000.0f32..1000.0, y1 in -1000.0f32..1000.0,
            at in 0.0f64..=1.0,
        ) {
            let f1 = f0 + gap;
            let frame = f0 + (f64::from(gap) * at).floor() as i32;
            let linear = [key(f0, y0, Interpolation::Linear), key(f1, y1, Interpolation::Linear)];
            let t = f64::from(frame - f0) / f64::from(gap);
            let expected = f64::from(y0) + (f64::from(y1) - f64::from(y0)) * t;
            let got = f64::from(evaluate_component(&linear, 0, frame));
            proptest::prop_assert!((got - expected).abs() <= 1e-4 * (1.0 + expected.abs()), "{got} vs {expected}");
            let constant = [key(f0, y0, Interpolation::Constant), key(f1, y1, Interpolation::Constant)];
            let want = if frame >= f1 { y1 } else { y0 };
            proptest::prop_assert_eq!(evaluate_component(&constant, 0, frame), want);
            // Outside the keys: the end keys' values.
            proptest::prop_assert_eq!(evaluate_component(&linear, 0, f0 - 1), y0);
            proptest::prop_assert_eq!(evaluate_component(&linear, 0, f1 + 1), y1);
        }
    }
}
