//! The contract's `temp_storage_mib` over MockBlender: a call that may write files starts only
//! below the ceiling, and a call that leaves the sandbox past it fails without what it wrote.
//! MockBlender writes no files, so a wrapper writes what Blender would for `file.save`.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use support::*;
use vibe_exec::stages::SandboxListing;
use vibe_transport::{MockBlender, MockTransport, Transport};

const MIB: usize = 1024 * 1024;

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
    // `file.save` writes `bytes` bytes at its path in the sandbox, as Blender would; the
    // kernel's own folder (a jailed kernel's private folder, say) is kept with the transport.
    let written = sandbox.path().to_path_buf();
    let transport = Arc::new(
        Hooked::with_state(MockTransport::new(MockBlender::new().with_files()), kernel)
            .with_storage(vec![kernel_path.clone()])
            .on_call(move |t, call| {
                if call.tool == "file.save" {
                    let path = call.params["path"].as_str().unwrap();
                    std::fs::write(written.join(path), vec![7u8; bytes]).unwrap();
                }
                t.inner.call(call)
            }),
    );
    let constraints = vibe_contract::Constraints {
        temp_storage_mib,
        ..Default::default()
    };
    let pipeline = file_pipeline(transport, "storage", constraints, sandbox.path()).await;
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
