//! Arguments, errors and exit statuses: usage errors in the tools' one
//! style, an error printed once with its causes, 0 success, 1 bad data or a
//! failed operation, 2 usage.

use super::*;
use crate::error::{Error, ErrorKind};
use std::io::Write;
use std::process::ExitCode;

/// The tool's arguments. A usage error is written in the tools' one style,
/// `mooncdc-x: what is wrong`, with clap's tip and usage after it, and the
/// tool exits 2; `--help` and `--version` print and exit 0.
pub fn parse_args<T: clap::Parser>(tool: &str) -> T {
    let mut cmd = args::with_sub_help(T::command());
    let parsed = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| T::from_arg_matches_mut(&mut m))
        .map_err(|e| e.format(&mut cmd));
    match parsed {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind as K;
            if matches!(
                e.kind(),
                K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                e.exit();
            }
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            let _ = write!(std::io::stderr(), "{tool}: {text}");
            std::process::exit(2);
        }
    }
}

/// Run a tool's body: print an error once with its cause chain, choose the
/// exit status, and treat a closed downstream pipe as a quiet success.
pub fn run(tool: &str, body: impl FnOnce() -> crate::error::Result<ExitCode>) -> ExitCode {
    run_with(tool, 1, body)
}

/// Like [`run`], with the status for a failed operation chosen by the tool
/// (`mooncdc-audit` uses 2, since 1 means "different").
pub fn run_with(
    tool: &str,
    failure: u8,
    body: impl FnOnce() -> crate::error::Result<ExitCode>,
) -> ExitCode {
    crate::log::init(tool);
    match body() {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let usage = err.kind() == ErrorKind::Usage;
            if !err.is_silent() {
                report_error(&err);
            }
            if usage {
                ExitCode::from(2)
            } else {
                ExitCode::from(failure)
            }
        }
    }
}

/// Write an error once, with its causes in plain words (no ` (os error N)`)
/// and its kind as a field, in the tools' one style.
pub fn report_error(err: &Error) {
    let mut msg = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        msg.push_str(&format!(
            ": {}",
            crate::error::strip_os_error(&s.to_string())
        ));
        source = s.source();
    }
    let kind = format!("{:?}", err.kind()).to_lowercase();
    crate::log::write("error", &msg, &[("kind", kind.into())]);
}

fn is_broken_pipe(err: &Error) -> bool {
    if err.is_broken_pipe() {
        return true;
    }
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || s.downcast_ref::<Error>().is_some_and(Error::is_broken_pipe)
        {
            return true;
        }
        source = s.source();
    }
    false
}
