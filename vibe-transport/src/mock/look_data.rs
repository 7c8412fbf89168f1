//! The settings of cameras, lights and the world, with the values Blender gives them: the
//! factory startup's Camera, Light and World, and new data-blocks as `bpy.data.*.new` makes
//! them (the kernel gives a new light a radius of 0.25 on every version: 3.4 makes 0.25, 4.x and
//! 5.x 0). Values are 32-bit floats, as Blender stores them.

/// A camera's settings (the `camera.set` tool's).
#[derive(Clone, Debug, PartialEq)]
pub struct CameraData {
    /// `PERSP`, `ORTHO` (or `PANO`, which only a person's file has).
    pub camera_type: String,
    /// Focal length in millimetres.
    pub lens: f32,
    /// Sensor width in millimetres.
    pub sensor_width: f32,
    /// Near clipping distance.
    pub clip_start: f32,
    /// Far clipping distance.
    pub clip_end: f32,
    /// Orthographic scale.
    pub ortho_scale: f32,
}

impl CameraData {
    /// A camera as `bpy.data.cameras.new` makes it.
    pub fn new() -> CameraData {
        CameraData {
            camera_type: "PERSP".to_owned(),
            lens: 50.0,
            sensor_width: 36.0,
            clip_start: 0.1,
            clip_end: 1000.0,
            ortho_scale: 6.0,
        }
    }

    /// The factory startup's camera (its far clip is 100, its orthographic scale 7.314286).
    pub fn factory() -> CameraData {
        CameraData {
            clip_end: 100.0,
            ortho_scale: 7.314_285_8,
            ..CameraData::new()
        }
    }
}

impl Default for CameraData {
    fn default() -> Self {
        CameraData::new()
    }
}

/// A light's settings (the `light.set` tool's). Blender keeps every type's settings on the
/// light whatever its type, so a type change brings back what the other type had.
#[derive(Clone, Debug, PartialEq)]
pub struct LightData {
    /// `POINT`, `SUN`, `SPOT`, `AREA`.
    pub light_type: String,
    /// Power in watts (a sun's strength).
    pub energy: f32,
    /// Linear RGB colour.
    pub color: [f32; 3],
    /// `shadow_soft_size`: the radius of a point or spot light.
    pub radius: f32,
    /// An area light's side.
    pub area_size: f32,
    /// A sun's angular diameter in radians.
    pub sun_angle: f32,
    /// A spot light's cone angle in radians.
    pub spot_size: f32,
    /// A spot light's blend.
    pub spot_blend: f32,
}

impl LightData {
    /// A light of `light_type` as the kernel makes it (`bpy.data.lights.new`, radius 0.25).
    pub fn new(light_type: &str) -> LightData {
        LightData {
            light_type: light_type.to_owned(),
            energy: 10.0,
            color: [1.0; 3],
            radius: 0.25,
            area_size: 0.25,
            sun_angle: 0.009_180_432,
            spot_size: std::f32::consts::FRAC_PI_4,
            spot_blend: 0.15,
        }
    }

    /// The factory startup's point light (1000 W, radius 0.1).
    pub fn factory() -> LightData {
        LightData {
            energy: 1000.0,
            radius: 0.1,
            area_size: 0.1,
            sun_angle: 0.199_337_3,
            spot_size: 1.308_996_9,
            ..LightData::new("POINT")
        }
    }

    /// The one `size` setting of the light's type: the radius of a point or spot light, the
    /// side of an area light, the angle of a sun.
    pub fn size(&self) -> f32 {
        match self.light_type.as_str() {
            "AREA" => self.area_size,
            "SUN" => self.sun_angle,
            _ => self.radius,
        }
    }

    /// Sets the `size` setting of the light's type.
    pub fn set_size(&mut self, size: f32) {
        match self.light_type.as_str() {
            "AREA" => self.area_size = size,
            "SUN" => self.sun_angle = size,
            _ => self.radius = size,
        }
    }
}

/// The scene's world: its Background node's colour and strength.
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    /// The world data-block's name.
    pub name: String,
    /// Linear RGB background colour.
    pub color: [f32; 3],
    /// Background strength.
    pub strength: f32,
}

impl World {
    /// A world as `world.set` makes one for a scene without: 0.05 grey, strength 1.
    pub fn new() -> World {
        World {
            name: "World".to_owned(),
            color: [0.05; 3],
            strength: 1.0,
        }
    }

    /// The factory startup's world (0.050876 grey, strength 1).
    pub fn factory() -> World {
        World {
            color: [0.050_876_09; 3],
            ..World::new()
        }
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}
