//! Generated documents: completion scripts and man pages (the tools' and
//! their subcommands'), as committed in `completions/` and `man/`.

use super::*;
use std::process::ExitCode;

/// The definition of `tool`, one of the seven, as the binaries parse with it.
fn tool_command(tool: &str) -> clap::Command {
    args::commands()
        .into_iter()
        .find(|c| c.get_name() == tool)
        .expect("one of the seven tools")
}

/// A tool's completion script for `shell`, as committed in `completions/`.
///
/// clap_complete names a hyphenated binary's subcommand states two ways in
/// bash (`mooncdc__capture__subcmd__status` while walking the words,
/// `mooncdc__subcmd__capture__subcmd__status` in the case arms), so
/// `mooncdc-capture status --<TAB>` offered nothing; one name is used.
pub fn completion(shell: clap_complete::Shell, tool: &str) -> Vec<u8> {
    let mut cmd = tool_command(tool);
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, tool, &mut out);
    if shell == clap_complete::Shell::Bash {
        if let Some((base, rest)) = tool.split_once('-') {
            let text = String::from_utf8(out).expect("clap_complete writes UTF-8");
            let wrong = format!("{base}__subcmd__{}", rest.replace('-', "__subcmd__"));
            let right = format!("{base}__{}", rest.replace('-', "__"));
            out = text.replace(&wrong, &right).into_bytes();
        }
    }
    out
}

/// A tool's own man page (section 1), with EXAMPLES, ENVIRONMENT, EXIT
/// STATUS and SEE ALSO after what the definitions give.
pub fn man_page(tool: &str) -> Vec<u8> {
    let mut cmd = tool_command(tool).disable_help_subcommand(true);
    cmd.build();
    render_man(cmd, args::man_sections(tool))
}

/// A subcommand's man page (`<tool>-<sub>.1`, the page its tool's
/// SUBCOMMANDS section refers to), with EXAMPLES, EXIT STATUS and SEE ALSO
/// as the tools' pages have them.
pub fn sub_man_page(tool: &str, sub: &str) -> Vec<u8> {
    let mut cmd = tool_command(tool).disable_help_subcommand(true);
    // Built, so the subcommand knows its parent's name (`mooncdc-capture init`).
    cmd.build();
    let sub_cmd = cmd
        .find_subcommand(sub)
        .unwrap_or_else(|| panic!("{tool} has no subcommand {sub}"))
        .clone();
    render_man(sub_cmd, args::sub_man_sections(tool, sub))
}

fn render_man(cmd: clap::Command, sections: Vec<(&str, String)>) -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .expect("rendering into memory cannot fail");
    for (title, text) in sections {
        out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
        for line in text.lines() {
            let roff = line.replace('\\', "\\e").replace('-', "\\-");
            let roff = if roff.starts_with('.') || roff.starts_with('\'') {
                format!("\\&{roff}")
            } else {
                roff
            };
            if line.starts_with("$ ") {
                out.extend_from_slice(format!(".nf\n{roff}\n.fi\n").as_bytes());
            } else {
                out.extend_from_slice(format!("{roff}\n").as_bytes());
            }
        }
    }
    out
}

/// `TOOL --generate-completions bash|zsh|fish` and `TOOL --generate-man`
/// (alone on the command line): print what `completions/` and `man/` hold
/// for the tool, so installing them is one command. `None`: neither asked.
pub fn print_generated(tool: &str) -> Option<ExitCode> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let text = match a.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--generate-man"] => man_page(tool),
        ["--generate-completions", shell] => {
            let shell = match shell {
                "bash" => clap_complete::Shell::Bash,
                "zsh" => clap_complete::Shell::Zsh,
                "fish" => clap_complete::Shell::Fish,
                other => {
                    eprintln!(
                        "{tool}: --generate-completions takes bash, zsh or fish, not {other:?}"
                    );
                    return Some(ExitCode::from(2));
                }
            };
            completion(shell, tool)
        }
        _ => return None,
    };
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    Some(if o.write_all(&text).and_then(|_| o.flush()).is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
