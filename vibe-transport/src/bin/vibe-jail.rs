//! `vibe-jail`: confines itself (rlimits, Landlock, seccomp) and executes a Vibe kernel.
//! The bridge starts it inside bubblewrap; see `vibe_transport::jail`.

#[cfg(target_os = "linux")]
fn main() {
    match vibe_transport::jail::launcher::LaunchPlan::parse(std::env::args_os().skip(1)) {
        Ok(plan) => {
            let error = plan.run();
            eprintln!("vibe-jail: {error}");
            std::process::exit(126);
        }
        Err(error) => {
            eprintln!("vibe-jail: {error}");
            std::process::exit(2);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("vibe-jail: confinement is implemented for Linux only");
    std::process::exit(126);
}
