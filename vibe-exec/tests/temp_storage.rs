//! The contract's `temp_storage_mib` over MockBlender: a call that may write files starts only
//! below the ceiling, and a call that leaves the sandbox past it fails without what it wrote.
//! MockBlender writes no files, so a wrapper writes what Blender would for `file.save`.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use support::*;
use vibe_errors::Envelope;
use vibe_exec::stages::SandboxListing;
use vibe_transport::{
    Call, Hello, MockBlender, MockTransport, SessionConfig, Transport, TransportError,
};

const MIB: usize = 1024 * 1024;

/// `file.save` writes `bytes` bytes at its path in the sandbox, as Blender would.
struct Writing {
    inner: MockTransport,
    sandbox: PathBuf,
    bytes: usize,
    /// The kernel's own folder (a jailed kernel's private folder, say).
    kernel: tempfile::TempDir,
}

#[async_trait]
impl Transport for Writing {
    fn hello(&self) -> &Hello {
        self.inner.hello()
    }
    fn next_id(&self) -> u64 {
        self.inner.next_id()
    }
    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.inner.configure(session).await
    }
    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        if call.tool == "file.save" {
            let path = call.params["path"].as_str().unwrap();
            std::fs::write(self.sandbox.join(path), vec![7u8; self.bytes]).unwrap();
        }
        self.inner.call(call).await
    }
    async fn cancel(&self, id: u64) -> Result<(), TransportError> {
        self.inner.cancel(id).await
    }
    async fn close(&self) -> Result<(), TransportError> {
        self.inner.close().await
    }
    fn storage_folders(&self) -> Vec<PathBuf> {
        vec![self.kernel.path().to_path_buf()]
    }
}

async fn pipeline(bytes: usize, temp_storage_mib: u64) -> (vibe_exec::Pipeline, tempfile::TempDir) {
    let (p, sandbox, _kernel) = pipeline_with_kernel(bytes, temp_storage_mib).await;
    (p, sandbox)
}

async fn pipeline_with_kernel(
    bytes: usize,
    temp_storage_mib: u64,
) -> (vibe_exec::Pipeline, tempfile::TempDir, PathBuf) {
    let sandbox = tempfile::tempdir().unwrap();
    let kernel = tempfile::tempdir().unwrap();
    let kernel_path = kernel.path().to_path_buf();
    let transport = Arc::new(Writing {
        inner: MockTransport::new(MockBlender::new().with_files()),
        sandbox: sandbox.path().to_path_buf(),
        bytes,
        kernel,
    });
    let constraints = vibe_contract::Constraints {
        temp_storage_mib,
        ..Default::default()
    };
    let agreement = agreement_for(
        transport.hello(),
        "storage",
        Some(constraints),
        &["file.write"],
    );
    let dyn_transport: Arc<dyn Transport> = transport;
    let pipeline = vibe_exec::Pipeline::builder(agreement, dyn_transport)
        .sandbox(vibe_exec::Sandbox::new(sandbox.path()).unwrap())
        .start()
        .await
        .unwrap();
    (pipeline, sandbox, kernel_path)
}

#[tokio::test]
async fn a_full_sandbox_refuses_writes_and_keeps_reads() {
    let (p, sandbox) = pipeline(1_000, 1).await;
    std::fs::create_dir(sandbox.path().join("renders")).unwrap();
    std::fs::write(sandbox.path().join("renders/old.png"), vec![0u8; MIB]).unwrap();
    let saved = p.call("file.save", json!({"path": "scene.blend"})).await;
    let error = saved
        .error()
        .expect("refused: the sandbox holds 1 MiB of 1");
    assert_eq!(error.code.as_str(), "contract_violation");
    assert_eq!(error.details["rule"], "temp_storage_mib");
    assert_eq!(error.details["limit"], 1);
    assert_eq!(error.details["used_bytes"], MIB as u64);
    assert!(!sandbox.path().join("scene.blend").exists(), "it never ran");
    assert!(p.call("object.info", json!({"name": "Cube"})).await.is_ok());
    // One byte under the ceiling, it runs.
    std::fs::write(
        sandbox.path().join("renders/old.png"),
        vec![0u8; MIB - 1_001],
    )
    .unwrap();
    let saved = p.call("file.save", json!({"path": "scene.blend"})).await;
    assert!(saved.is_ok(), "{saved:?}");
}

#[tokio::test]
async fn a_write_past_the_ceiling_fails_and_leaves_nothing_behind() {
    let (p, sandbox) = pipeline(2 * MIB, 1).await;
    std::fs::write(sandbox.path().join("keep.txt"), b"the person's note").unwrap();
    let saved = p.call("file.save", json!({"path": "big.blend"})).await;
    let error = saved.error().expect("past the ceiling");
    assert_eq!(error.details["rule"], "temp_storage_mib");
    assert_eq!(error.details["removed"], json!(["big.blend"]));
    assert_eq!(error.details["scene"], "unchanged");
    assert!(!sandbox.path().join("big.blend").exists());
    assert_eq!(
        std::fs::read(sandbox.path().join("keep.txt")).unwrap(),
        b"the person's note"
    );
    // The session goes on: a save that fits works.
    let (p, sandbox) = pipeline(MIB / 2, 1).await;
    assert!(
        p.call("file.save", json!({"path": "small.blend"}))
            .await
            .is_ok()
    );
    assert!(sandbox.path().join("small.blend").exists());
}

#[test]
fn a_listing_tells_new_and_changed_files_from_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old"), b"1").unwrap();
    std::fs::write(dir.path().join("same"), b"1").unwrap();
    let before = SandboxListing::of(dir.path()).unwrap();
    assert_eq!(before.bytes(), 2);
    std::fs::write(dir.path().join("old"), b"22").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/new"), b"333").unwrap();
    let after = SandboxListing::of(dir.path()).unwrap();
    assert_eq!(after.bytes(), 6);
    assert_eq!(
        after.written_since(&before),
        [dir.path().join("old"), dir.path().join("sub/new")]
    );
}

#[tokio::test]
async fn the_kernels_own_folders_count_too() {
    let (p, sandbox, kernel) = pipeline_with_kernel(1_000, 1).await;
    // The sandbox is empty; the kernel's folder holds a snapshot of 1 MiB.
    std::fs::write(kernel.join("snapshot.blend"), vec![0u8; MIB]).unwrap();
    let saved = p.call("file.save", json!({"path": "scene.blend"})).await;
    let error = saved
        .error()
        .expect("refused: the kernel's folder fills the ceiling");
    assert_eq!(error.details["rule"], "temp_storage_mib");
    assert!(!sandbox.path().join("scene.blend").exists());
    // The kernel's files are the kernel's: never removed by the bridge.
    assert!(kernel.join("snapshot.blend").exists());
}
