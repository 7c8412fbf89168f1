//! The data model of MockBlender: Blender's default scene and the rules Blender applies to it.

use std::collections::BTreeMap;

use super::animation::{Key, Timeline};
pub use super::look_data::{CameraData, LightData, World};

/// The name of every scene's master collection.
pub const MASTER_COLLECTION: &str = "Scene Collection";

/// Blender keeps names to 63 bytes.
pub const MAX_NAME_BYTES: usize = 63;

/// Object types as Blender names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectType {
    /// A mesh.
    Mesh,
    /// An empty.
    Empty,
    /// A camera.
    Camera,
    /// A light.
    Light,
    /// An armature (a rig); agents cannot create one, scenes built by people have them.
    Armature,
}

impl ObjectType {
    /// Blender's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectType::Mesh => "MESH",
            ObjectType::Empty => "EMPTY",
            ObjectType::Camera => "CAMERA",
            ObjectType::Light => "LIGHT",
            ObjectType::Armature => "ARMATURE",
        }
    }
}

/// Mesh element counts of the primitives the registry can create, as Blender builds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeshCounts {
    /// Vertices.
    pub vertices: u64,
    /// Edges.
    pub edges: u64,
    /// Polygons.
    pub polygons: u64,
}

/// The counts of a primitive by its registry name.
pub fn primitive_counts(primitive: &str) -> Option<MeshCounts> {
    let (vertices, edges, polygons) = match primitive {
        "cube" => (8, 12, 6),
        "plane" => (4, 4, 1),
        // 32 segments, 16 rings.
        "uv_sphere" => (482, 992, 512),
        // 32 vertices, capped.
        "cylinder" => (64, 96, 34),
        "monkey" => (507, 1005, 500),
        _ => return None,
    };
    Some(MeshCounts {
        vertices,
        edges,
        polygons,
    })
}

/// The extent of a primitive made `size` across (`mesh.create_cube` and `mesh.create_plane` take
/// a size, `object.create` makes every primitive 2 across), as a mesh's `data.extent` reports
/// it: the size of the box around its vertices, rounded as the kernel rounds it.
///
/// Blender stores vertices as 32-bit floats, so a cube or a plane is exactly `size as f32`
/// across. The UV sphere and the cylinder have radius `size / 2` and the cylinder depth `size`;
/// the sphere's 32-gon falls short of its diameter by about 6e-7 of it (1.9999987 at size 2),
/// which the rounding hides at the size they are made at. Suzanne has no size: Blender's monkey
/// is 2.734375 x 1.703125 x 1.96875.
pub fn primitive_extent(primitive: &str, size: f64) -> Option<[f64; 3]> {
    let s = f64::from(size as f32);
    let extent = match primitive {
        "cube" | "uv_sphere" | "cylinder" => [s, s, s],
        "plane" => [s, s, 0.0],
        "monkey" => [2.734375, 1.703125, 1.96875],
        _ => return None,
    };
    Some(extent.map(round_extent))
}

/// Rounds an extent as the kernel does, with Python's `round(x, 4)`: to the nearest 4-decimal
/// number, ties to even (Rust's `{:.4}` formats exactly so; `(x * 1e4).round()` would not).
fn round_extent(x: f64) -> f64 {
    format!("{x:.4}").parse().unwrap_or(x)
}

/// Object data.
#[derive(Clone, Debug, PartialEq)]
pub enum ObjectData {
    /// A mesh with its element counts.
    Mesh(MeshCounts),
    /// A light with its settings.
    Light(LightData),
    /// A camera with its settings.
    Camera(CameraData),
    /// An armature with its number of bones.
    Armature(u32),
    /// No data.
    Empty,
}

/// One modifier with the parameters the registry exposes.
#[derive(Clone, Debug, PartialEq)]
pub struct Modifier {
    /// Unique within its object.
    pub name: String,
    /// `SUBSURF`, `BEVEL`, `ARRAY`, `MIRROR`, `SOLIDIFY`.
    pub kind: String,
    /// SUBSURF viewport levels.
    pub levels: u32,
    /// SUBSURF render levels.
    pub render_levels: u32,
    /// BEVEL width.
    pub width: f32,
    /// BEVEL segments.
    pub segments: u32,
    /// ARRAY count.
    pub count: u32,
    /// SOLIDIFY thickness.
    pub thickness: f32,
}

impl Modifier {
    /// A modifier of `kind` with Blender's defaults.
    pub fn with_defaults(name: String, kind: &str) -> Modifier {
        let (levels, render_levels, count, segments) = vibe_contract::MODIFIER_DEFAULTS;
        Modifier {
            name,
            kind: kind.to_owned(),
            levels,
            render_levels,
            width: 0.1,
            segments,
            count,
            thickness: 0.01,
        }
    }

    /// Blender's default name for a modifier type.
    pub fn default_name(kind: &str) -> &'static str {
        match kind {
            "SUBSURF" => "Subdivision",
            "BEVEL" => "Bevel",
            "ARRAY" => "Array",
            "MIRROR" => "Mirror",
            _ => "Solidify",
        }
    }

    /// How many polygons this modifier turns `polygons` into (the estimate shared with the bridge
    /// and the kernel: [`vibe_contract::polygon_estimate`]).
    pub fn estimate(&self, polygons: u64) -> u64 {
        vibe_contract::polygon_estimate(
            polygons,
            &self.kind,
            self.levels.max(self.render_levels),
            self.count,
            self.segments,
        )
    }
}

/// The factory startup's transforms are 32-bit floats; these are their exact values.
fn f32x3(v: [f64; 3]) -> [f32; 3] {
    [v[0] as f32, v[1] as f32, v[2] as f32]
}

/// One object.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// Stable identity, which survives renames (Blender's pointer).
    pub uid: u64,
    /// The name.
    pub name: String,
    /// The type.
    pub kind: ObjectType,
    /// Location, stored as Blender stores it (32-bit floats).
    pub location: [f32; 3],
    /// XYZ Euler rotation in radians.
    pub rotation: [f32; 3],
    /// Scale.
    pub scale: [f32; 3],
    /// The parent's name.
    pub parent: Option<String>,
    /// The collections the object is linked to, in link order.
    pub collections: Vec<String>,
    /// Material slots (a slot may be empty).
    pub materials: Vec<Option<String>>,
    /// Modifiers, in stack order.
    pub modifiers: Vec<Modifier>,
    /// Object data.
    pub data: ObjectData,
    /// The size of the box around its mesh's vertices (local space, before modifiers), as
    /// `data.extent` reports it ([`primitive_extent`]); zeros for objects without a mesh. Kept
    /// here rather than in [`MeshCounts`], whose fields embedders fill in by hand.
    pub mesh_extent: [f64; 3],
    /// Linked from a library.
    pub linked: bool,
    /// A library override (what used to be a proxy).
    pub library_override: bool,
    /// Keys by property name (see `animation::PROPERTIES`), each list sorted by frame and not
    /// empty; no entry for a property without keys.
    pub animation: BTreeMap<String, Vec<Key>>,
}

impl Object {
    /// A new object at the origin with unit scale (a mesh's `mesh_extent` starts at zeros).
    pub fn new(
        uid: u64,
        name: &str,
        kind: ObjectType,
        data: ObjectData,
        collection: &str,
    ) -> Object {
        Object {
            uid,
            name: name.to_owned(),
            kind,
            location: [0.0; 3],
            rotation: [0.0; 3],
            scale: [1.0; 3],
            parent: None,
            collections: vec![collection.to_owned()],
            materials: Vec::new(),
            modifiers: Vec::new(),
            data,
            mesh_extent: [0.0; 3],
            linked: false,
            library_override: false,
            animation: BTreeMap::new(),
        }
    }

    /// Base polygons of the object's mesh (0 for other types).
    pub fn polygons(&self) -> u64 {
        match &self.data {
            ObjectData::Mesh(counts) => counts.polygons,
            _ => 0,
        }
    }

    /// Estimated polygons after the modifier stack.
    pub fn estimated_polygons(&self) -> u64 {
        self.modifiers
            .iter()
            .fold(self.polygons(), |p, m| m.estimate(p))
    }
}

/// One collection (the master collection is implicit).
#[derive(Clone, Debug, PartialEq)]
pub struct Collection {
    /// The name.
    pub name: String,
    /// The parent collection; `None` is the master collection.
    pub parent: Option<String>,
}

/// A material's Principled BSDF inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Principled {
    /// RGBA base color.
    pub base_color: [f32; 4],
    /// Metallic.
    pub metallic: f32,
    /// Roughness.
    pub roughness: f32,
    /// RGBA emission colour (Blender 4+'s "Emission Color").
    pub emission_color: [f32; 4],
    /// Emission strength.
    pub emission_strength: f32,
    /// Alpha.
    pub alpha: f32,
    /// Transmission (Blender 4+'s "Transmission Weight").
    pub transmission: f32,
    /// The image texture on the base colour, if any.
    pub texture: Option<Texture>,
}

impl Default for Principled {
    /// A new material's inputs as Blender 4+ makes them (and the kernel makes them on 3.x).
    fn default() -> Self {
        Principled {
            base_color: [0.8, 0.8, 0.8, 1.0],
            metallic: 0.0,
            roughness: 0.5,
            emission_color: [1.0; 4],
            emission_strength: 0.0,
            alpha: 1.0,
            transmission: 0.0,
            texture: None,
        }
    }
}

/// An image texture on a material's base colour.
#[derive(Clone, Debug, PartialEq)]
pub struct Texture {
    /// The image data-block's name (the file's name; `.001` and on when taken).
    pub image: String,
    /// The file's path relative to the sandbox.
    pub path: String,
}

/// One loaded image: its data-block name and the absolute path of its file.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// The name.
    pub name: String,
    /// The file it was loaded from.
    pub file: String,
}

/// One material.
#[derive(Clone, Debug, PartialEq)]
pub struct Material {
    /// The name.
    pub name: String,
    /// Its Principled BSDF, if it has one.
    pub principled: Option<Principled>,
}

/// The whole scene. Two scenes are equal when their content is: `next_uid` is a counter
/// that only grows (a rollback does not take it back), not content.
#[derive(Clone, Debug)]
pub struct Scene {
    /// The scene's name.
    pub name: String,
    /// Objects by name.
    pub objects: BTreeMap<String, Object>,
    /// Collections in creation order (Blender's order of children).
    pub collections: Vec<Collection>,
    /// Materials by name.
    pub materials: BTreeMap<String, Material>,
    /// Images loaded as textures, in load order.
    pub images: Vec<Image>,
    /// The view layer's active object.
    pub active: Option<String>,
    /// The scene camera's object name (what renders are made from).
    pub camera: Option<String>,
    /// The scene's world, if it has one.
    pub world: Option<World>,
    /// The timeline: frame range, frame rate, current frame.
    pub timeline: Timeline,
    /// The next object uid.
    pub next_uid: u64,
}

impl PartialEq for Scene {
    fn eq(&self, other: &Scene) -> bool {
        (
            &self.name,
            &self.objects,
            &self.collections,
            &self.materials,
            &self.images,
            &self.active,
            &self.camera,
            &self.world,
            &self.timeline,
        ) == (
            &other.name,
            &other.objects,
            &other.collections,
            &other.materials,
            &other.images,
            &other.active,
            &other.camera,
            &other.world,
            &other.timeline,
        )
    }
}

impl Scene {
    /// Blender's factory-startup scene: a cube with a material, a camera and a light in
    /// "Collection".
    pub fn default_startup() -> Scene {
        let mut cube = Object::new(
            1,
            "Cube",
            ObjectType::Mesh,
            ObjectData::Mesh(primitive_counts("cube").unwrap_or(MeshCounts {
                vertices: 8,
                edges: 12,
                polygons: 6,
            })),
            "Collection",
        );
        cube.materials.push(Some("Material".to_owned()));
        cube.mesh_extent = primitive_extent("cube", 2.0).unwrap_or([2.0; 3]);
        let mut camera = Object::new(
            2,
            "Camera",
            ObjectType::Camera,
            ObjectData::Camera(CameraData::factory()),
            "Collection",
        );
        camera.location = f32x3([7.358891487121582, -6.925790786743164, 4.958309173583984]);
        camera.rotation = f32x3([1.1093189716339111, 0.0, 0.8149281740188599]);
        let mut light = Object::new(
            3,
            "Light",
            ObjectType::Light,
            ObjectData::Light(LightData::factory()),
            "Collection",
        );
        light.location = f32x3([4.076245307922363, 1.0054539442062378, 5.903861999511719]);
        light.rotation = f32x3([0.6503279805183411, 0.055217113345861435, 1.8663908243179321]);
        let objects = [cube, camera, light]
            .into_iter()
            .map(|o| (o.name.clone(), o))
            .collect();
        let material = Material {
            name: "Material".to_owned(),
            principled: Some(Principled::default()),
        };
        Scene {
            name: "Scene".to_owned(),
            objects,
            collections: vec![Collection {
                name: "Collection".to_owned(),
                parent: None,
            }],
            materials: [("Material".to_owned(), material)].into_iter().collect(),
            images: Vec::new(),
            active: Some("Cube".to_owned()),
            camera: Some("Camera".to_owned()),
            world: Some(World::factory()),
            timeline: Timeline::default(),
            next_uid: 4,
        }
    }

    /// Whether a collection (or the master collection) of this name exists.
    pub fn has_collection(&self, name: &str) -> bool {
        name == MASTER_COLLECTION || self.collections.iter().any(|c| c.name == name)
    }

    /// The collection new objects go to: the master's first child, else the master.
    pub fn default_collection(&self) -> String {
        self.collections
            .iter()
            .find(|c| c.parent.is_none())
            .map(|c| c.name.clone())
            .unwrap_or_else(|| MASTER_COLLECTION.to_owned())
    }

    /// Renames an object in every place its name is referenced.
    pub fn rename_object(&mut self, old: &str, new: &str) {
        if let Some(mut object) = self.objects.remove(old) {
            object.name = new.to_owned();
            self.objects.insert(new.to_owned(), object);
        }
        for object in self.objects.values_mut() {
            if object.parent.as_deref() == Some(old) {
                object.parent = Some(new.to_owned());
            }
        }
        if self.active.as_deref() == Some(old) {
            self.active = Some(new.to_owned());
        }
        if self.camera.as_deref() == Some(old) {
            self.camera = Some(new.to_owned());
        }
    }

    /// Whether `ancestor` is `name` or one of its parents.
    pub fn is_ancestor(&self, ancestor: &str, name: &str) -> bool {
        let mut current = Some(name.to_owned());
        let mut steps = 0;
        while let Some(n) = current {
            if n == ancestor {
                return true;
            }
            steps += 1;
            if steps > self.objects.len() {
                return false;
            }
            current = self.objects.get(&n).and_then(|o| o.parent.clone());
        }
        false
    }

    /// Names of the objects whose parent is `name`, sorted.
    pub fn children(&self, name: &str) -> Vec<String> {
        self.objects
            .values()
            .filter(|o| o.parent.as_deref() == Some(name))
            .map(|o| o.name.clone())
            .collect()
    }
}
