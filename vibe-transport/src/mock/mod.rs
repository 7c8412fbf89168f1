//! MockBlender: an in-memory Blender that implements blender-core v1 with the live kernel's
//! semantics, for tests, benches and the quickstart. No I/O.
//!
//! It starts from Blender's factory scene (Cube with "Material", Camera, Light in
//! "Collection"), applies Blender's rules (unique names like `Cube.001` on rename, 32-bit float
//! transforms, default modifier parameters), keeps a console error ring, a busy state, one
//! transaction at a time, and the session's record of the objects it created and the modifiers
//! it added (the actuator lock refuses rename, delete, move and modifier removal of anything
//! else, as the kernel does). Cameras, lights and the world carry the settings the look pack
//! edits ([`CameraData`], [`LightData`], [`World`], the scene camera), with the values of
//! Blender's factory scene and of new data-blocks. Faults are injected by a seeded [`FaultPlan`].
//!
//! The animate pack's keys live on each [`Object`] (by property, see [`PROPERTIES`]: its
//! transforms, a camera's lens, a light's energy and colour, which Blender keeps on the
//! camera's or light's data) and the [`Timeline`] on the [`Scene`]; setting the current frame
//! poses animated objects, their camera and light settings included. CONSTANT
//! and LINEAR keys evaluate bit for bit as Blender does; BEZIER is exact to the scenarios'
//! rounding where a key's auto-clamped handles are flat (see `animation.rs`).
//!
//! It cannot run Python: its hello offers no `code_exec` unless an embedder plugs in a
//! [`CodeHandler`]. It offers `file.read`, `file.write` and `render` only when asked
//! ([`MockBlender::with_files`]): it has no .blend reader or writer, so `file.save` keeps the
//! scene in memory under the path it would have written and `file.open` loads it back from
//! there; it has no renderer, so `render.still` writes a flat grey PNG of the asked size (a real
//! file in the sandbox, for whatever reads the image back); otherwise negotiation excludes those
//! tools honestly. `file.export` and `file.import` write and read real OBJ, ASCII STL and glTF
//! files in the sandbox (the formats its hello lists; see `exchange.rs`).

mod animation;
mod exchange;
mod exchange_formats;
mod exchange_geometry;
mod exchange_refs;
mod faults;
mod files;
mod lock;
mod look_data;
pub(crate) mod png;
mod scene;
mod tools;
mod transport;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde_json::Value;
use vibe_contract::{BlenderProfile, BlenderVersion, Confinement};
use vibe_errors::Envelope;

pub use animation::{Interpolation, Key, PROPERTIES, Property, Timeline};
pub use faults::{Fault, FaultPlan};
pub use scene::{
    CameraData, Collection, LightData, MASTER_COLLECTION, MAX_NAME_BYTES, Material, MeshCounts,
    Modifier, Object, ObjectData, ObjectType, Principled, Scene, World, primitive_counts,
    primitive_extent,
};
pub use transport::MockTransport;

use crate::frame::{Hello, KERNEL_NAME, PROTOCOL_VERSION, SessionConfig};

/// How many console entries the error ring keeps.
pub const CONSOLE_CAPACITY: usize = 200;

/// Runs agent code for `python.exec`: returns captured stdout, or the raw error text.
pub type CodeHandler = Box<dyn FnMut(&str, &mut Scene) -> Result<String, String> + Send>;

/// One console entry, as `blender.errors` returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsoleEntry {
    /// Sequence number, from 1.
    pub seq: u64,
    /// Where it came from (the tool name).
    pub source: String,
    /// The sanitized message.
    pub message: String,
}

/// What the mock did with one call.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The answer, unless the fault swallowed it (a hang).
    pub envelope: Option<Envelope>,
    /// A fault for the wire layer to apply to the answer (hang, drop, malformed, slow drip).
    pub wire_fault: Option<Fault>,
}

struct Transaction {
    id: String,
    scene: Scene,
    created: BTreeSet<u64>,
    modifiers: BTreeSet<(u64, String)>,
}

/// The in-memory Blender.
pub struct MockBlender {
    /// This mock's start, as the hello's `instance`.
    instance: u64,
    scene: Scene,
    version: BlenderVersion,
    background: bool,
    busy: bool,
    transaction: Option<Transaction>,
    transactions_started: u64,
    console: VecDeque<ConsoleEntry>,
    console_seq: u64,
    console_dropped: u64,
    session: SessionConfig,
    /// Objects the agent created this session, by uid.
    created: BTreeSet<u64>,
    /// Modifiers the agent added this session, by object uid and modifier name (the object's
    /// renames keep its uid). Emptied by a new session and by every file load.
    modifiers: BTreeSet<(u64, String)>,
    /// Whether the hello offers `file.read` and `file.write`.
    offers_files: bool,
    /// The scenes `file.save` wrote (and [`MockBlender::add_file`] planted), by absolute path.
    files: BTreeMap<String, Scene>,
    /// The path of the file `file.open` loaded last ("" for none).
    file: String,
    /// The geometry of the meshes `file.import` made, by uid (the model exchange's).
    geometry: BTreeMap<u64, exchange_geometry::Geometry>,
    /// The last name the session saw for each uid, to tell identity drift from a typo.
    seen: HashMap<String, u64>,
    faults: FaultPlan,
    calls: u64,
    code: Option<CodeHandler>,
}

impl std::fmt::Debug for MockBlender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBlender")
            .field("version", &self.version)
            .field("objects", &self.scene.objects.len())
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl Default for MockBlender {
    fn default() -> Self {
        MockBlender::new()
    }
}

/// The features MockBlender offers in its hello.
pub const MOCK_FEATURES: [&str; 3] = ["scene.read", "scene.write", "transactions"];

impl MockBlender {
    /// Blender 5.0.1, headless, with the factory scene.
    pub fn new() -> MockBlender {
        MockBlender {
            instance: crate::rng::unique_suffix(),
            scene: Scene::default_startup(),
            version: BlenderVersion::new(5, 0, 1),
            background: true,
            busy: false,
            transaction: None,
            transactions_started: 0,
            console: VecDeque::new(),
            console_seq: 0,
            console_dropped: 0,
            session: SessionConfig::new("unconfigured").capabilities(MOCK_FEATURES),
            created: BTreeSet::new(),
            modifiers: BTreeSet::new(),
            offers_files: false,
            files: BTreeMap::new(),
            file: String::new(),
            geometry: BTreeMap::new(),
            seen: HashMap::new(),
            faults: FaultPlan::none(),
            calls: 0,
            code: None,
        }
    }

    /// Reports another Blender version (to mirror a live target in conformance runs).
    pub fn with_version(mut self, version: BlenderVersion) -> MockBlender {
        self.version = version;
        self
    }

    /// Injects faults.
    pub fn with_faults(mut self, faults: FaultPlan) -> MockBlender {
        self.faults = faults;
        self
    }

    /// Plugs in a handler for `python.exec`; the hello then offers `code_exec`.
    pub fn with_code_handler(mut self, handler: CodeHandler) -> MockBlender {
        self.code = Some(handler);
        self
    }

    /// Offers `file.read`, `file.write` and `render`: `file.save` keeps the scene in memory
    /// under the absolute path it would have written (the sandbox joined with the relative path),
    /// `file.open` loads a scene kept there, with the kernel's path rules, and `render.still`
    /// writes a flat grey PNG of the asked size at its path in the sandbox.
    pub fn with_files(mut self) -> MockBlender {
        self.offers_files = true;
        self
    }

    /// Puts a `.blend` a person made at the absolute `path`, for `file.open` (a project root's
    /// file, say).
    pub fn add_file(&mut self, path: &str, scene: Scene) {
        self.files.insert(files::key(path), scene);
    }

    /// The scene kept at the absolute `path` by `file.save` or [`MockBlender::add_file`].
    pub fn file(&self, path: &str) -> Option<&Scene> {
        self.files.get(&files::key(path))
    }

    /// The scene, for inspection.
    pub fn scene(&self) -> &Scene {
        &self.scene
    }

    /// The scene, for set-up by tests (not through the agent's tools).
    pub fn scene_mut(&mut self) -> &mut Scene {
        &mut self.scene
    }

    /// Enters or leaves the busy state Blender is in while it loads or saves a file.
    pub fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    /// How many calls the mock has received.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The kernel's hello.
    pub fn hello(&self) -> Hello {
        let mut features: BTreeSet<String> = MOCK_FEATURES.iter().map(|s| s.to_string()).collect();
        if self.code.is_some() {
            features.insert("code_exec".into());
        }
        if self.offers_files {
            features.insert("file.read".into());
            features.insert("file.write".into());
            features.insert("render".into());
        }
        Hello {
            protocol: PROTOCOL_VERSION,
            kernel: KERNEL_NAME.into(),
            kernel_version: concat!("mock-", env!("CARGO_PKG_VERSION")).into(),
            blender: BlenderProfile {
                version: self.version,
                build_hash: Some("mock".into()),
                platform: std::env::consts::OS.into(),
                background: self.background,
                features,
                // The embedder that plugs in a code runner is the operator who opted in to it.
                confinement: Confinement {
                    unconfined_code_opt_in: self.code.is_some(),
                    ..Confinement::default()
                },
            },
            auth_required: false,
            max_frame_bytes: crate::codec::DEFAULT_MAX_FRAME_BYTES as u64,
            instance: Some(format!("mock-{:016x}", self.instance)),
            max_batch_calls: Some(crate::MAX_BATCH_CALLS as u32),
            formats: Some(
                exchange::MOCK_FORMATS
                    .iter()
                    .map(|f| f.to_string())
                    .collect(),
            ),
        }
    }

    /// Applies per-session settings. A new session id forgets what the agent created and
    /// added. Settings whose sandbox or project roots are not absolute folders other than the
    /// filesystem root, or whose sandbox and a project root lie one inside the other, are refused
    /// (`invalid_arguments`, field `session`) and the earlier settings kept, as by the kernel
    /// (which also checks that the folders exist; the mock has no file system).
    pub fn configure(&mut self, session: &SessionConfig) -> Envelope {
        if let Err(why) = files::check_folders(session) {
            return Envelope::Err(
                vibe_errors::ErrorBody::new(
                    vibe_errors::ErrorCode::InvalidArguments,
                    format!("configure: {why}"),
                )
                .with_detail("field", "session"),
            );
        }
        if session.session_id != self.session.session_id {
            self.created.clear();
            self.modifiers.clear();
            self.seen.clear();
        }
        let offered = self.hello().blender.features;
        self.session = session.clone();
        self.session.capabilities.retain(|c| offered.contains(c));
        Envelope::ok(serde_json::json!({
            "session_id": session.session_id,
            "capabilities": self.session.capabilities,
        }))
    }

    /// Receives one call: counts it, applies its fault, runs the tool.
    pub fn handle(&mut self, tool: &str, params: &Value) -> Outcome {
        self.calls += 1;
        let fault = self.faults.take(self.calls);
        match fault {
            Some(Fault::Hang) => Outcome {
                envelope: None,
                wire_fault: Some(Fault::Hang),
            },
            Some(Fault::Rename { from, to }) => {
                if self.scene.objects.contains_key(&from) && !self.scene.objects.contains_key(&to) {
                    self.scene.rename_object(&from, &to);
                }
                Outcome {
                    envelope: Some(self.execute(tool, params)),
                    wire_fault: None,
                }
            }
            Some(Fault::Raise) => Outcome {
                envelope: Some(self.execute_and_raise(tool, params)),
                wire_fault: None,
            },
            Some(wire) => Outcome {
                envelope: Some(self.execute(tool, params)),
                wire_fault: Some(wire),
            },
            None => Outcome {
                envelope: Some(self.execute(tool, params)),
                wire_fault: None,
            },
        }
    }
}
