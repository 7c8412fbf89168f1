//! One screen from nothing to a ready pipeline: pick a [`Target`], name the capabilities, start.
//!
//! [`connect`] hides the steps every embedder repeats: starting or reaching the kernel (a
//! headless Blender is started in the jail and supervised: a call past its deadline kills it and
//! a fresh one is restored), the host proposal and the bridge's policy, negotiation against the
//! default registry, and the pipeline with its sandbox. Each step's types stay public in the
//! re-exported crates for embedders who need more.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::audit::AuditWriter;
use crate::contract::{
    BridgePolicy, CAP_CODE_EXEC, Constraints, HostProfile, HostProposal, Refusal, RegistryError,
    default_registries, negotiate,
};
use crate::exec::{Pipeline, PipelineError, ProjectRoot, Sandbox};
use crate::transport::jail::Jail;
use crate::transport::{
    MockBlender, MockTransport, StdioOptions, StdioTransport, SupervisedKernel, TcpOptions,
    TcpTransport, Transport, TransportError, kernel_factory,
};

/// Where the Blender is.
#[derive(Clone)]
#[non_exhaustive]
pub enum Target {
    /// The embedded in-memory MockBlender (no Blender needed), with its file tools and its
    /// stand-in render (a flat grey PNG in the sandbox).
    Mock,
    /// A Python with the `bpy` module (`pip install bpy`), started headless by the bridge.
    BpyPython(PathBuf),
    /// A `blender` binary, started headless (`-b`) by the bridge.
    Blender(PathBuf),
    /// A Blender already running the GUI add-on, over loopback TCP with its token.
    Tcp {
        /// The add-on's address (loopback).
        addr: SocketAddr,
        /// The add-on's token.
        token: String,
    },
    /// A transport the embedder built (a wrapped mock, a test double): negotiation and the
    /// pipeline run on it as they would on any other.
    Transport(Arc<dyn Transport>),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Mock => f.write_str("Mock"),
            Target::BpyPython(python) => f.debug_tuple("BpyPython").field(python).finish(),
            Target::Blender(binary) => f.debug_tuple("Blender").field(binary).finish(),
            // The token stays out of logs.
            Target::Tcp { addr, .. } => f.debug_struct("Tcp").field("addr", addr).finish(),
            Target::Transport(transport) => f
                .debug_tuple("Transport")
                .field(&transport.hello().kernel)
                .finish(),
        }
    }
}

impl Target {
    /// The embedded MockBlender.
    pub fn mock() -> Target {
        Target::Mock
    }

    /// A Python with the `bpy` module.
    pub fn bpy_python(python: impl Into<PathBuf>) -> Target {
        Target::BpyPython(python.into())
    }

    /// A `blender` binary.
    pub fn blender(binary: impl Into<PathBuf>) -> Target {
        Target::Blender(binary.into())
    }

    /// The GUI add-on at `addr` with `token`.
    pub fn tcp(addr: SocketAddr, token: impl Into<String>) -> Target {
        Target::Tcp {
            addr,
            token: token.into(),
        }
    }

    /// A transport of the embedder's own.
    pub fn transport(transport: Arc<dyn Transport>) -> Target {
        Target::Transport(transport)
    }
}

/// Why [`Connect::start`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The kernel could not be started or reached.
    #[error("the kernel could not be reached: {0}")]
    Transport(#[from] TransportError),
    /// The default registry did not load.
    #[error("the registry did not load: {0}")]
    Registry(#[from] RegistryError),
    /// Negotiation refused the session (the refusal says which rule and why).
    #[error("negotiation refused the session: {}", .0.error.message)]
    Refused(Box<Refusal>),
    /// The pipeline could not start (sandbox overlap, memory ceiling, configure refused).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The sandbox folder could not be made or used.
    #[error("the sandbox {path}: {source}")]
    Sandbox {
        /// The folder.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// A project root could not be used.
    #[error("the project root {path}: {source}")]
    ProjectRoot {
        /// The folder.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

/// Starts a session on `target`: see [`Connect`] for the settings.
pub fn connect(target: Target) -> Connect {
    Connect {
        target,
        capabilities: ["scene.read", "scene.write", "transactions"]
            .map(String::from)
            .into(),
        sandbox: None,
        project_roots: Vec::new(),
        constraints: None,
        audit: None,
        host: "vibe-embedder".into(),
        jail: true,
        packs: None,
    }
}

/// The settings of a session, then [`Connect::start`].
#[derive(Debug)]
#[must_use = "a Connect does nothing until start"]
pub struct Connect {
    target: Target,
    capabilities: BTreeSet<String>,
    sandbox: Option<PathBuf>,
    project_roots: Vec<PathBuf>,
    constraints: Option<Constraints>,
    audit: Option<Arc<AuditWriter>>,
    host: String,
    jail: bool,
    packs: Option<BTreeSet<String>>,
}

impl Connect {
    /// The capabilities the session asks for (default `scene.read`, `scene.write`,
    /// `transactions`); `code_exec` also needs a jailed kernel or the GUI operator's opt-in.
    pub fn capabilities<S: Into<String>>(mut self, wanted: impl IntoIterator<Item = S>) -> Connect {
        self.capabilities = wanted.into_iter().map(Into::into).collect();
        self
    }

    /// The tool packs the session selects (`core` always; without this, the default packs:
    /// core, organize, io and code; `look` only when named). The contract's 35-tool cap applies
    /// to the selection: core with look, animate and io is 35; adding organize or code to them
    /// is refused, naming each pack's count.
    pub fn packs<S: Into<String>>(mut self, packs: impl IntoIterator<Item = S>) -> Connect {
        self.packs = Some(packs.into_iter().map(Into::into).collect());
        self
    }

    /// The folder the agent may write (created if missing); without one, file-writing tools
    /// are refused.
    pub fn sandbox(mut self, folder: impl Into<PathBuf>) -> Connect {
        self.sandbox = Some(folder.into());
        self
    }

    /// A read-only folder of the person's that `file.open` may open `.blend` files from.
    pub fn project_root(mut self, folder: impl Into<PathBuf>) -> Connect {
        self.project_roots.push(folder.into());
        self
    }

    /// The session's constraints (deadlines, memory, temporary storage, sanity limits).
    pub fn constraints(mut self, constraints: Constraints) -> Connect {
        self.constraints = Some(constraints);
        self
    }

    /// The audit log's writer.
    pub fn audit(mut self, writer: Arc<AuditWriter>) -> Connect {
        self.audit = Some(writer);
        self
    }

    /// The host's name in the contract (default `vibe-embedder`).
    pub fn host(mut self, name: impl Into<String>) -> Connect {
        self.host = name.into();
        self
    }

    /// Starts a headless Blender without the jail (default: jailed). An unjailed kernel is
    /// never granted `code_exec`.
    pub fn unjailed(mut self) -> Connect {
        self.jail = false;
        self
    }

    async fn transport(&self) -> Result<Arc<dyn Transport>, ConnectError> {
        let headless = match &self.target {
            Target::Mock => {
                return Ok(Arc::new(MockTransport::new(
                    MockBlender::new().with_files(),
                )));
            }
            Target::Tcp { addr, token } => {
                let options = TcpOptions::new(*addr).with_token(token.clone());
                return Ok(Arc::new(TcpTransport::connect(options).await?));
            }
            Target::Transport(transport) => return Ok(Arc::clone(transport)),
            Target::BpyPython(python) => (python.clone(), false),
            Target::Blender(binary) => (binary.clone(), true),
        };
        let (program, is_blender) = headless;
        if !self.jail {
            let options = match is_blender {
                true => StdioOptions::blender(&program),
                false => StdioOptions::bpy_python(&program),
            }
            .map_err(|e| TransportError::Connect(e.into()))?;
            return Ok(Arc::new(StdioTransport::spawn(options).await?));
        }
        // The jail's only writable place is the sandbox; without one, a private empty folder.
        let writable = match &self.sandbox {
            Some(folder) => folder.clone(),
            None => crate::transport::kernel::private_base()
                .map_err(|e| TransportError::Connect(e.into()))?
                .join("connect-sandbox"),
        };
        std::fs::create_dir_all(&writable).map_err(|source| ConnectError::Sandbox {
            path: writable.clone(),
            source,
        })?;
        let mut jail = Jail::new(&writable);
        if let Some(constraints) = &self.constraints {
            jail = jail.memory_mib(constraints.max_memory_mib);
        }
        let jail = self
            .project_roots
            .iter()
            .fold(jail, |jail, root| jail.read_root(root));
        let factory = kernel_factory(move || match is_blender {
            true => StdioOptions::jailed_blender(&program, &jail),
            false => StdioOptions::jailed_bpy_python(&program, &jail),
        });
        let mut kernel = SupervisedKernel::start(factory, default_registries()?.tools).await?;
        if self.capabilities.contains(CAP_CODE_EXEC) {
            // Every agent code call retires its kernel: a warm spare spares the wait.
            kernel = kernel.with_warm_spare().await;
        }
        Ok(Arc::new(kernel))
    }

    /// Starts or reaches the kernel, negotiates, and returns the ready pipeline.
    pub async fn start(self) -> Result<Pipeline, ConnectError> {
        let sandbox = match &self.sandbox {
            Some(folder) => {
                std::fs::create_dir_all(folder).map_err(|source| ConnectError::Sandbox {
                    path: folder.clone(),
                    source,
                })?;
                Some(
                    Sandbox::new(folder).map_err(|source| ConnectError::Sandbox {
                        path: folder.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        let transport = self.transport().await?;
        let host = HostProfile {
            name: self.host.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: self.capabilities.clone(),
            ..HostProfile::default()
        };
        let mut proposal = HostProposal::new(format!("{}-{}", self.host, std::process::id()), host);
        proposal.constraints = self.constraints.clone();
        proposal.packs = self.packs.clone();
        let mut policy = BridgePolicy::default();
        if self.capabilities.contains(CAP_CODE_EXEC) {
            policy.capabilities.insert(CAP_CODE_EXEC.into());
        }
        if let Some(constraints) = &self.constraints {
            policy.constraints = constraints.clone();
        }
        let agreement = negotiate(
            &proposal,
            &policy,
            &transport.hello().blender,
            &default_registries()?,
        )
        .map_err(|refusal| ConnectError::Refused(Box::new(refusal)))?;
        let mut builder = Pipeline::builder(agreement, transport).code_gate();
        if let Some(sandbox) = sandbox {
            builder = builder.sandbox(sandbox);
        }
        for root in &self.project_roots {
            let root = ProjectRoot::new(root).map_err(|source| ConnectError::ProjectRoot {
                path: root.clone(),
                source,
            })?;
            builder = builder.project_root(root);
        }
        if let Some(audit) = self.audit {
            builder = builder.audit(audit);
        }
        Ok(builder.start().await?)
    }
}
