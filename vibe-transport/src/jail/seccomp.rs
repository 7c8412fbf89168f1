//! The seccomp filters of the jail, compiled with `seccompiler`.
//!
//! Three programs, stacked (the kernel evaluates every filter; the strictest answer wins):
//!
//! * [`confinement_filter`], applied by the launcher: no new processes (`fork`, `vfork`, and
//!   `clone` without `CLONE_THREAD`, so threads still start), no sockets but `AF_UNIX`, no
//!   `memfd_create` (memory the address-space ceiling would not count), no hard or symbolic links
//!   (a link outlives a move into `HUMAN_ONLY/`, or traps a program outside), no setuid or setgid
//!   modes on any file (a host user could run such a file from the sandbox), and none
//!   of the calls that reach beyond the process (ptrace, mounts, namespaces, kernel modules,
//!   BPF, perf events, io_uring, userfaultfd, keyrings, handles to files by inode).
//! * [`clone3_filter`], applied by the launcher: `clone3` answers `ENOSYS`, so the C library
//!   falls back to `clone`, whose flags the first filter can see (`clone3` passes them in memory).
//! * [`exec_filter`], installed by the kernel itself before it reads its first frame (the
//!   launcher must still `execve` Blender): no `execve` or `execveat`, so the kernel cannot be
//!   replaced by another program that would keep its pipes.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

// Not covered: x32 system call numbers (bit 0x40000000) on x86-64 kernels built with x32
// support, which a filter keyed by syscall number does not see; such kernels answer ENOSYS
// where x32 is off, as on the machines this was tested on.

/// Why a filter could not be built.
pub type FilterError = seccompiler::BackendError;

fn arch() -> Result<TargetArch, FilterError> {
    TargetArch::try_from(std::env::consts::ARCH)
}

/// Calls refused outright by [`confinement_filter`].
fn refused_calls() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_kexec_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_syslog,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_quotactl,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_pidfd_getfd,
        libc::SYS_personality,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_kexec_file_load,
    ]);
    calls
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    answer: SeccompAction,
) -> Result<BpfProgram, FilterError> {
    SeccompFilter::new(rules, SeccompAction::Allow, answer, arch()?)?.try_into()
}

/// No new processes, no sockets but `AF_UNIX`, nothing beyond the process; `EPERM` otherwise.
pub fn confinement_filter() -> Result<BpfProgram, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = refused_calls()
        .into_iter()
        .map(|call| (call, Vec::new()))
        .collect();
    // A clone without CLONE_THREAD makes a process; threads keep working.
    let no_thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )?;
    rules.insert(libc::SYS_clone, vec![SeccompRule::new(vec![no_thread])?]);
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?;
    rules.insert(libc::SYS_socket, vec![SeccompRule::new(vec![not_unix])?]);
    // Memory held in a memfd is not counted against the address-space ceiling.
    rules.insert(libc::SYS_memfd_create, Vec::new());
    // No links: a hard link keeps reaching a file the human later moves into HUMAN_ONLY/, and a
    // symbolic link planted in the sandbox is a trap for programs outside the jail.
    for call in [libc::SYS_linkat, libc::SYS_symlinkat] {
        rules.insert(call, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    for call in [libc::SYS_link, libc::SYS_symlink] {
        rules.insert(call, Vec::new());
    }
    // No setuid or setgid files (a host user could run one from the sandbox with the bridge
    // user's rights): the mode argument of every call that sets or creates a mode.
    for (call, mode_arg) in [
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mkdirat, 2),
        (libc::SYS_mknodat, 2),
    ]
    .into_iter()
    .chain(legacy_mode_calls())
    {
        rules.insert(call, set_id_bits(mode_arg)?);
    }
    program(rules, SeccompAction::Errno(libc::EPERM as u32))
}

/// The x86-64 calls that predate the `*at` family, with the index of their mode argument.
fn legacy_mode_calls() -> Vec<(i64, u8)> {
    #[cfg(target_arch = "x86_64")]
    return vec![
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mkdir, 1),
        (libc::SYS_mknod, 1),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// Matches when the mode argument has the setuid or the setgid bit.
fn set_id_bits(mode_arg: u8) -> Result<Vec<SeccompRule>, FilterError> {
    [libc::S_ISUID, libc::S_ISGID]
        .into_iter()
        .map(|bit| {
            SeccompRule::new(vec![SeccompCondition::new(
                mode_arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(u64::from(bit)),
                u64::from(bit),
            )?])
        })
        .collect()
}

/// `clone3` answers `ENOSYS`, so thread creation falls back to `clone`, whose flags the
/// confinement filter sees; `openat2` likewise (its mode is in memory too), so `open` falls back
/// to `openat`.
pub fn clone3_filter() -> Result<BpfProgram, FilterError> {
    program(
        BTreeMap::from([
            (libc::SYS_clone3, Vec::new()),
            (libc::SYS_openat2, Vec::new()),
        ]),
        SeccompAction::Errno(libc::ENOSYS as u32),
    )
}

/// No program execution: `execve` and `execveat` answer `EPERM`.
pub fn exec_filter() -> Result<BpfProgram, FilterError> {
    program(
        BTreeMap::from([
            (libc::SYS_execve, Vec::new()),
            (libc::SYS_execveat, Vec::new()),
        ]),
        SeccompAction::Errno(libc::EPERM as u32),
    )
}

/// A program as raw bytes (`struct sock_filter` in native byte order, 8 bytes each), as the
/// kernel's `prctl(PR_SET_SECCOMP)` wants it.
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    bytes
}
