//! The command line: one backend, then settings. Hand-parsed (a dozen flags do not need a
//! parser crate); every mistake is a usage error that names the flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The usage text `--help` prints (and a usage error ends with).
pub const USAGE: &str = "\
usage: vibe-mcp BACKEND [OPTIONS]

BACKEND (exactly one):
  --mock                  the embedded MockBlender (no Blender needed)
  --blender PATH          a blender binary, started headless (-b) in the jail
  --bpy-python PATH       a Python with the bpy module, started in the jail
  --tcp ADDR              the GUI add-on at ADDR (loopback), with --token-file FILE

OPTIONS:
  --token-file FILE       the add-on's token (with --tcp)
  --sandbox DIR           the folder the agent may write (default: this user's
                          $XDG_DATA_HOME/vibe/sandbox or ~/.local/share/vibe/sandbox)
  --audit FILE            the audit log (default: <sandbox>.vibe_audit.jsonl beside the sandbox)
  --project-root DIR      a read-only folder file_open may open .blend files from (repeatable)
  --packs LIST            the tool packs to select, comma-separated (core always;
                          default: the packs marked default)
  --allow-code            offer python_exec (only a confined kernel is granted it)
  --no-jail               start a headless Blender unconfined (never offers python_exec)
  --mock-delay TOOL=MS    with --mock: TOOL takes MS milliseconds more (repeatable; to try
                          progress and cancellation without a Blender)
  -h, --help              this text
  -V, --version           the version
";

/// Where the Blender is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded MockBlender.
    Mock,
    /// A `blender` binary, started headless.
    Blender(PathBuf),
    /// A Python with the `bpy` module.
    BpyPython(PathBuf),
    /// The GUI add-on over loopback TCP.
    Tcp {
        /// Its address.
        addr: SocketAddr,
        /// The file holding its token, if it wants one.
        token_file: Option<PathBuf>,
    },
}

/// A server's settings, as the flags give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The Blender.
    pub backend: Backend,
    /// `--sandbox`; none means the per-user default.
    pub sandbox: Option<PathBuf>,
    /// `--audit`; none means beside the sandbox.
    pub audit: Option<PathBuf>,
    /// Every `--project-root`, in order.
    pub project_roots: Vec<PathBuf>,
    /// `--packs`; none means the registries' default packs.
    pub packs: Option<Vec<String>>,
    /// `--allow-code`.
    pub allow_code: bool,
    /// False with `--no-jail`.
    pub jail: bool,
    /// Every `--mock-delay TOOL=MS`.
    pub mock_delays: Vec<(String, Duration)>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Serve with these options.
    Serve(Box<Options>),
    /// Print the usage text.
    Help,
    /// Print the version.
    Version,
}

/// A command line that cannot be served; the message names the flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage_error(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

/// The pack names of a `--packs` value: comma-separated, blanks ignored (`""` selects only the
/// packs every session has).
pub fn parse_packs(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse_delay(value: &str) -> Result<(String, Duration), UsageError> {
    let bad = || usage_error(format!("--mock-delay wants TOOL=MS, got {value:?}"));
    let (tool, ms) = value.split_once('=').ok_or_else(bad)?;
    let ms: u64 = ms.trim().parse().map_err(|_| bad())?;
    if tool.trim().is_empty() {
        return Err(bad());
    }
    Ok((tool.trim().to_owned(), Duration::from_millis(ms)))
}

/// Parses the arguments after the program's name.
pub fn parse<I, S>(args: I) -> Result<Command, UsageError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args = args.into_iter().map(Into::into);
    let mut backends: Vec<Backend> = Vec::new();
    let mut token_file = None;
    let mut options = Options {
        backend: Backend::Mock,
        sandbox: None,
        audit: None,
        project_roots: Vec::new(),
        packs: None,
        allow_code: false,
        jail: true,
        mock_delays: Vec::new(),
    };
    while let Some(arg) = args.next() {
        // `--flag=value` is `--flag value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.into())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, UsageError> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| usage_error(format!("{flag} needs {what}")))
        };
        let switch = matches!(
            flag.as_str(),
            "--mock" | "--allow-code" | "--no-jail" | "--help" | "--version"
        );
        if switch && inline.is_some() {
            return Err(usage_error(format!("{flag} takes no value")));
        }
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--mock" => backends.push(Backend::Mock),
            "--blender" => backends.push(Backend::Blender(value("a path")?.into())),
            "--bpy-python" => backends.push(Backend::BpyPython(value("a path")?.into())),
            "--tcp" => {
                let text = value("an address")?;
                let addr = text.parse().map_err(|_| {
                    usage_error(format!(
                        "--tcp wants HOST:PORT (an IP address), got {text:?}"
                    ))
                })?;
                backends.push(Backend::Tcp {
                    addr,
                    token_file: None,
                });
            }
            "--token-file" => token_file = Some(PathBuf::from(value("a file")?)),
            "--sandbox" => options.sandbox = Some(value("a folder")?.into()),
            "--audit" => options.audit = Some(value("a file")?.into()),
            "--project-root" => options.project_roots.push(value("a folder")?.into()),
            "--packs" => options.packs = Some(parse_packs(&value("a list of packs")?)),
            "--allow-code" => options.allow_code = true,
            "--no-jail" => options.jail = false,
            "--mock-delay" => options.mock_delays.push(parse_delay(&value("TOOL=MS")?)?),
            _ => return Err(usage_error(format!("unknown argument {arg:?}"))),
        }
    }
    let mut backend = match backends.len() {
        1 => backends.remove(0),
        0 => {
            return Err(usage_error(
                "name one backend: --mock, --blender, --bpy-python or --tcp",
            ));
        }
        _ => return Err(usage_error("name only one backend")),
    };
    match (&mut backend, token_file) {
        (
            Backend::Tcp {
                token_file: slot, ..
            },
            file,
        ) => *slot = file,
        (_, Some(_)) => return Err(usage_error("--token-file goes with --tcp")),
        (_, None) => {}
    }
    if !options.mock_delays.is_empty() && backend != Backend::Mock {
        return Err(usage_error("--mock-delay goes with --mock"));
    }
    if !options.jail && !matches!(backend, Backend::Blender(_) | Backend::BpyPython(_)) {
        return Err(usage_error(
            "--no-jail goes with --blender or --bpy-python (the server starts no other kernel)",
        ));
    }
    options.backend = backend;
    Ok(Command::Serve(Box::new(options)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> Options {
        match parse(args.iter().copied()) {
            Ok(Command::Serve(options)) => *options,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn refused(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().0
    }

    #[test]
    fn each_backend_and_its_settings() {
        assert_eq!(serve(&["--mock"]).backend, Backend::Mock);
        assert_eq!(
            serve(&["--blender", "/usr/bin/blender"]).backend,
            Backend::Blender("/usr/bin/blender".into())
        );
        assert_eq!(
            serve(&["--bpy-python=venv/bin/python"]).backend,
            Backend::BpyPython("venv/bin/python".into())
        );
        assert_eq!(
            serve(&["--tcp", "127.0.0.1:9833", "--token-file", "token.txt"]).backend,
            Backend::Tcp {
                addr: "127.0.0.1:9833".parse().unwrap(),
                token_file: Some("token.txt".into())
            }
        );
        let options = serve(&[
            "--bpy-python",
            "py",
            "--sandbox",
            "/s",
            "--audit",
            "/a.jsonl",
            "--project-root",
            "/p1",
            "--project-root=/p2",
            "--allow-code",
            "--no-jail",
        ]);
        assert_eq!(options.sandbox, Some("/s".into()));
        assert_eq!(options.audit, Some("/a.jsonl".into()));
        assert_eq!(
            options.project_roots,
            vec![PathBuf::from("/p1"), PathBuf::from("/p2")]
        );
        assert!(options.allow_code && !options.jail);
        // Nothing given: the defaults.
        let plain = serve(&["--mock"]);
        assert_eq!(
            (plain.sandbox, plain.audit, plain.packs, plain.allow_code),
            (None, None, None, false)
        );
        assert!(plain.jail);
    }

    #[test]
    fn packs_are_a_comma_separated_list() {
        assert_eq!(
            serve(&["--mock", "--packs", "look, animate,,io"]).packs,
            Some(vec!["look".into(), "animate".into(), "io".into()])
        );
        // An empty list selects no optional pack (core stays: the contract adds it).
        assert_eq!(serve(&["--mock", "--packs="]).packs, Some(vec![]));
    }

    #[test]
    fn mock_delays_name_a_tool_and_milliseconds() {
        assert_eq!(
            serve(&["--mock", "--mock-delay", "render.still=1500"]).mock_delays,
            vec![("render.still".into(), Duration::from_millis(1500))]
        );
        for bad in ["render.still", "render.still=soon", "=5"] {
            assert!(refused(&["--mock", "--mock-delay", bad]).contains("TOOL=MS"));
        }
        assert!(refused(&["--blender", "b", "--mock-delay", "x=1"]).contains("with --mock"));
    }

    #[test]
    fn mistakes_are_usage_errors_that_name_the_flag() {
        assert!(refused(&[]).contains("name one backend"));
        assert!(refused(&["--mock", "--blender", "b"]).contains("only one backend"));
        assert!(refused(&["--mock", "--sandbox"]).contains("--sandbox needs a folder"));
        assert!(refused(&["--mock", "--frobnicate"]).contains("\"--frobnicate\""));
        assert!(refused(&["--tcp", "localhost"]).contains("HOST:PORT"));
        assert!(refused(&["--mock", "--token-file", "t"]).contains("with --tcp"));
        assert!(refused(&["--mock", "--no-jail"]).contains("--no-jail goes with"));
        assert!(refused(&["--mock=yes"]).contains("takes no value"));
    }

    #[test]
    fn help_and_version_and_the_usage_text() {
        assert_eq!(parse(["--help"]).unwrap(), Command::Help);
        assert_eq!(parse(["--mock", "-h"]).unwrap(), Command::Help);
        assert_eq!(parse(["-V"]).unwrap(), Command::Version);
        // Every flag the parser takes is in the usage text.
        for flag in [
            "--mock",
            "--blender",
            "--bpy-python",
            "--tcp",
            "--token-file",
            "--sandbox",
            "--audit",
            "--project-root",
            "--packs",
            "--allow-code",
            "--no-jail",
            "--mock-delay",
        ] {
            assert!(USAGE.contains(flag), "{flag}");
        }
    }
}
