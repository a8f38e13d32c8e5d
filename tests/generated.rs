//! Man pages and shell completions are generated from the clap definitions in
//! `mooncdc::cli::args::commands()` and committed, so that packagers need no
//! build step and a review shows how a change to an option reads to users.
//! This test fails when a committed file is stale, missing or stray (left over
//! from a command that is gone). To regenerate everything:
//!
//! ```text
//! MOONCDC_BLESS=1 cargo test --test generated
//! ```

use clap::Command;
use clap_complete::Shell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BLESS_VAR: &str = "MOONCDC_BLESS";
const REGENERATE: &str = "MOONCDC_BLESS=1 cargo test --test generated";

/// Files in `man/` that are written by hand, not generated.
const MAN_HANDWRITTEN: &[&str] = &["README.md"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some_and(|v| v == "1")
}

/// One generated file: where it goes, which command it documents, its text.
struct Generated {
    /// Relative to the crate root, with `/` separators, e.g. `man/mooncdc-split.1`.
    path: String,
    /// The tool whose definition produced it.
    command: String,
    /// What it is, for messages ("man page", "bash completion", ...).
    what: String,
    contents: Vec<u8>,
}

/// The man page of a command and, recursively, of each visible subcommand
/// (`<name>-<sub>.1`, the pages the parent's SUBCOMMANDS section refers to).
/// This is what `clap_mangen::generate_to` writes, rendered in memory.
fn man_pages(tool: &str, cmd: Command, out: &mut Vec<Generated>) {
    fn walk(tool: &str, cmd: Command, out: &mut Vec<Generated>) {
        let subs: Vec<Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .cloned()
            .collect();
        let top = cmd.get_name() == tool;
        let man = clap_mangen::Man::new(cmd.clone());
        let contents = if top {
            // The tool's own page, as the binary prints it (with examples,
            // environment, exit status and the other tools).
            mooncdc::cli::man_page(tool)
        } else {
            // A subcommand's page, with its examples and exit status.
            let _ = man;
            mooncdc::cli::sub_man_page(tool, cmd.get_name())
        };
        out.push(Generated {
            path: format!("man/{}", man.get_filename()),
            command: tool.to_string(),
            what: "man page".to_string(),
            contents,
        });
        for sub in subs {
            walk(tool, sub, out);
        }
    }
    // As clap_mangen::generate_to does: no page for the `help` subcommand, and
    // a built command so that subcommands know their parents' names.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    walk(tool, cmd, out);
}

fn completions(tool: &str, cmd: &Command, out: &mut Vec<Generated>) {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let _ = cmd;
        let contents = mooncdc::cli::completion(shell, tool);
        out.push(Generated {
            path: format!(
                "completions/{}",
                clap_complete::Generator::file_name(&shell, tool)
            ),
            command: tool.to_string(),
            what: format!("{shell} completion"),
            contents,
        });
    }
}

/// Every file the current definitions generate, after checking each definition.
fn generate_all() -> Vec<Generated> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for cmd in mooncdc::cli::args::commands() {
        let name = cmd.get_name().to_string();
        assert!(names.insert(name.clone()), "commands() lists {name} twice");
        // Panics with clap's own message on a definition error (conflicting
        // short options, a `requires` naming no argument, ...).
        cmd.clone().debug_assert();
        man_pages(&name, cmd.clone(), &mut out);
        completions(&name, &cmd, &mut out);
    }
    out
}

/// The first line at which two texts differ, for the failure message.
fn first_difference(committed: &[u8], generated: &[u8]) -> String {
    let a = String::from_utf8_lossy(committed);
    let b = String::from_utf8_lossy(generated);
    let (mut la, mut lb) = (a.lines(), b.lines());
    let mut n = 0;
    loop {
        n += 1;
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (None, None) => return "the texts differ only in line endings".to_string(),
            (x, y) => {
                return format!(
                    "first difference at line {n}:\n      committed: {}\n      generated: {}",
                    x.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                    y.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                )
            }
        }
    }
}

/// The file names in a folder (a missing folder is empty).
fn listing(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| {
                e.expect("cannot read a folder entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => panic!("cannot list {}: {e}", dir.display()),
    }
}

#[test]
fn man_pages_and_completions_are_current() {
    let root = root();
    let generated = generate_all();
    let bless = blessing();
    let mut problems = String::new();

    for g in &generated {
        let path = root.join(&g.path);
        let committed = match std::fs::read(&path) {
            Ok(c) => Some(c),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("cannot read {}: {e}", g.path),
        };
        if committed.as_deref() == Some(&g.contents[..]) {
            continue;
        }
        if bless {
            std::fs::create_dir_all(path.parent().expect("a file in a folder"))
                .unwrap_or_else(|e| panic!("cannot create the folder of {}: {e}", g.path));
            std::fs::write(&path, &g.contents)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", g.path));
            eprintln!("wrote {}", g.path);
            continue;
        }
        match committed {
            None => writeln!(
                problems,
                "- {}: the {} of {} is missing",
                g.path, g.what, g.command
            ),
            Some(c) => writeln!(
                problems,
                "- {}: the {} of {} is stale ({})",
                g.path,
                g.what,
                g.command,
                first_difference(&c, &g.contents)
            ),
        }
        .expect("writing to a String cannot fail");
    }

    // Files no current command generates: left over from a renamed or removed
    // command (or a removed subcommand), they would install stale docs.
    let expected: BTreeSet<&str> = generated.iter().map(|g| g.path.as_str()).collect();
    for (dir, handwritten) in [("man", MAN_HANDWRITTEN), ("completions", &[][..])] {
        for name in listing(&root.join(dir)) {
            let rel = format!("{dir}/{name}");
            if expected.contains(rel.as_str()) || handwritten.contains(&name.as_str()) {
                continue;
            }
            if bless {
                std::fs::remove_file(root.join(&rel))
                    .unwrap_or_else(|e| panic!("cannot remove the stray file {rel}: {e}"));
                eprintln!("removed {rel}");
                continue;
            }
            writeln!(
                problems,
                "- {rel}: no command in mooncdc::cli::args::commands() generates this file \
                 (left over from a command that is gone?)"
            )
            .expect("writing to a String cannot fail");
        }
    }

    assert!(
        problems.is_empty(),
        "man pages or completions do not match the clap definitions:\n{problems}\
         Regenerate them with `{REGENERATE}` and commit the result."
    );
}

/// Each binary `src/bin/mooncdc-*.rs` has its definition in `commands()`, and
/// each definition has its binary, so no tool ships without a man page and
/// completions, and none is documented that does not exist.
#[test]
fn every_binary_has_a_command_definition() {
    let bins: BTreeSet<String> = listing(&root().join("src/bin"))
        .into_iter()
        .filter_map(|f| f.strip_suffix(".rs").map(str::to_string))
        .filter(|n| n.starts_with("mooncdc"))
        .collect();
    let defined: BTreeSet<String> = mooncdc::cli::args::commands()
        .iter()
        .map(|c| c.get_name().to_string())
        .collect();
    let undefined: Vec<_> = bins.difference(&defined).collect();
    let unbuilt: Vec<_> = defined.difference(&bins).collect();
    assert!(
        undefined.is_empty(),
        "binaries without a definition in mooncdc::cli::args::commands(): {undefined:?}"
    );
    assert!(
        unbuilt.is_empty(),
        "definitions in mooncdc::cli::args::commands() without a src/bin/<name>.rs: {unbuilt:?}"
    );
}

/// The systemd unit example (examples/systemd) is a valid unit, checked by
/// `systemd-analyze verify` where systemd's tools are installed.
#[test]
fn the_systemd_unit_example_verifies() {
    let analyze = std::path::Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        eprintln!("systemd-analyze is not installed: the unit is not verified here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A template is verified through an instance of it.
    let unit = dir.path().join("mooncdc-pipeline@test.service");
    std::fs::copy("examples/systemd/mooncdc-pipeline@.service", &unit).unwrap();
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each tool's man page has EXAMPLES, ENVIRONMENT, EXIT STATUS and SEE
/// ALSO; each tool's --help ends with an example.
#[test]
fn man_pages_and_help_have_examples() {
    for cmd in mooncdc::cli::args::commands() {
        let tool = cmd.get_name().to_string();
        let page = std::fs::read_to_string(root().join(format!("man/{tool}.1"))).unwrap();
        for section in [
            "EXAMPLES",
            "ENVIRONMENT",
            "EXIT STATUS",
            "FILES",
            "SEE ALSO",
        ] {
            assert!(
                page.contains(&format!(".SH \"{section}\"")),
                "{tool}: no {section}"
            );
        }
        let out = std::process::Command::new(
            env!("CARGO_BIN_EXE_mooncdc-apply").replace("mooncdc-apply", &tool),
        )
        .arg("--help")
        .output()
        .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Example: "),
            "{tool} --help has no example:\n{help}"
        );
    }
}

/// Each subcommand's man page (`mooncdc-capture-init.1`, …) has EXAMPLES
/// that run that subcommand, EXIT STATUS and SEE ALSO, and its `--help` ends
/// with an example and the exit statuses, as the tools' pages and help do.
#[test]
fn subcommand_man_pages_have_examples_and_exit_status() {
    let mut pages = 0;
    for cmd in mooncdc::cli::args::commands() {
        let tool = cmd.get_name().to_string();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            let path = root().join(format!("man/{tool}-{name}.1"));
            let page = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            pages += 1;
            for section in ["EXAMPLES", "EXIT STATUS", "SEE ALSO"] {
                assert!(
                    page.contains(&format!(".SH \"{section}\"")),
                    "{tool} {name}: its man page has no {section}"
                );
            }
            let examples = &page[page.find(".SH \"EXAMPLES\"").unwrap()..];
            let examples = &examples[..examples[1..].find(".SH").map_or(examples.len(), |i| i + 1)];
            let runs = format!("$ {} {name} ", tool.replace('-', "\\-"));
            assert!(
                examples.contains(&runs),
                "{tool} {name}: no example runs it ({runs:?}):\n{examples}"
            );
            let exit = &page[page.find(".SH \"EXIT STATUS\"").unwrap()..];
            assert!(
                exit.contains("0 ") && exit.contains("1 "),
                "{tool} {name}: {exit}"
            );
            assert!(page.contains(&format!("{}(1)", tool.replace('-', "\\-"))));
            // And `TOOL SUB --help` ends with an example, as the tools' do.
            let out = std::process::Command::new(
                env!("CARGO_BIN_EXE_mooncdc-apply").replace("mooncdc-apply", &tool),
            )
            .args([name, "--help"])
            .output()
            .unwrap();
            let help = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success()
                    && help.contains(&format!("Example: {tool} {name} "))
                    && help.contains("Exit status: 0 "),
                "{tool} {name} --help has no example or exit status:\n{help}"
            );
        }
    }
    assert_eq!(
        pages, 11,
        "capture's nine subcommands, apply's cursor and cleanup"
    );
}

/// Drive bash's completion as bash-completion does: its library loaded,
/// the tool's script sourced, the function the script registered for the
/// tool (`complete -p`, never a name guessed here) called with the words
/// typed so far, the cursor on the last; what it offers.
fn bash_complete(tool: &str, words: &[&str]) -> Vec<String> {
    let library = "/usr/share/bash-completion/bash_completion";
    assert!(
        std::path::Path::new(library).exists(),
        "bash-completion is not installed (scripts/test.sh installs it)"
    );
    let script = root().join(format!("completions/{tool}.bash"));
    let n = words.len() - 1;
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source {library}; source '{}'; spec=$(complete -p '{tool}') || exit 3; func=${{spec##*-F }}; func=${{func%% *}}; COMP_WORDS=({}); COMP_CWORD={n}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \"$func\" '{tool}' '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words.join(" "),
        words[n],
        if n > 0 { words[n - 1] } else { "" }
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "-c", &prog])
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Completions that work, in bash, for a tool and for its subcommands.
#[test]
fn bash_completion_completes_subcommands_and_their_options() {
    let subs = bash_complete("mooncdc-capture", &["mooncdc-capture", "st"]);
    assert!(subs.contains(&"status".to_string()), "{subs:?}");
    let opts = bash_complete("mooncdc-capture", &["mooncdc-capture", "status", "--"]);
    assert!(
        opts.contains(&"--source".to_string()) && opts.contains(&"--slot".to_string()),
        "{opts:?}"
    );
    let opts = bash_complete("mooncdc-apply", &["mooncdc-apply", "cursor", "--"]);
    assert!(opts.contains(&"--target".to_string()), "{opts:?}");
    let opts = bash_complete("mooncdc-merge", &["mooncdc-merge", "--output-f"]);
    assert_eq!(opts, ["--output-format"]);
}

/// What zsh's completion system offers for a line typed then Tab, in an
/// interactive zsh on a pseudo-terminal (tests/shell/zsh_complete.zsh).
fn zsh_complete(line: &str) -> Vec<String> {
    let out = std::process::Command::new("zsh")
        .arg("-f")
        .arg(root().join("tests/shell/zsh_complete.zsh"))
        .arg(root().join("completions"))
        .arg(line)
        .output()
        .expect("zsh runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "zsh did not complete {line:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What fish offers (`complete -C`) for a line, with the tool's script loaded.
fn fish_complete(tool: &str, line: &str) -> Vec<String> {
    let script = root().join(format!("completions/{tool}.fish"));
    let out = std::process::Command::new("fish")
        .args(["--no-config", "-c"])
        .arg(format!(
            "source {}; complete -C {}",
            script.display(),
            shell_quote(line)
        ))
        .output()
        .expect("fish runs (scripts/test.sh installs it)");
    assert!(out.status.success(), "fish: {out:?}");
    // Each line is a match, then a tab and its description.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .collect()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "\\'"))
}

/// The same questions as for bash, asked of zsh and fish.
#[test]
fn zsh_and_fish_completion_complete_subcommands_and_their_options() {
    type Ask = dyn Fn(&str, &str) -> Vec<String>;
    let shells: [(&str, Box<Ask>); 2] = [
        (
            "zsh",
            Box::new(|_tool: &str, line: &str| zsh_complete(line)),
        ),
        ("fish", Box::new(fish_complete)),
    ];
    for (shell, ask) in &shells {
        let subs = ask("mooncdc-capture", "mooncdc-capture st");
        assert!(subs.contains(&"status".to_string()), "{shell}: {subs:?}");
        let opts = ask("mooncdc-capture", "mooncdc-capture status --");
        assert!(
            opts.contains(&"--source".to_string()) && opts.contains(&"--slot".to_string()),
            "{shell}: {opts:?}"
        );
        let opts = ask("mooncdc-apply", "mooncdc-apply cursor --");
        assert!(opts.contains(&"--target".to_string()), "{shell}: {opts:?}");
        let opts = ask("mooncdc-merge", "mooncdc-merge --output-f");
        assert_eq!(opts, ["--output-format"], "{shell}");
        let values = ask("mooncdc-merge", "mooncdc-merge --output-format ");
        assert_eq!(values, ["json", "jsonl", "objects"], "{shell}");
    }
}

/// Each binary prints its committed completions and man page, so installing
/// them is one command.
#[test]
fn binaries_print_their_completions_and_man_page() {
    for cmd in mooncdc::cli::args::commands() {
        let tool = cmd.get_name().to_string();
        let exe = env!("CARGO_BIN_EXE_mooncdc-apply").replace("mooncdc-apply", &tool);
        for (args, file) in [
            (
                vec!["--generate-completions", "bash"],
                format!("completions/{tool}.bash"),
            ),
            (
                vec!["--generate-completions", "zsh"],
                format!("completions/_{tool}"),
            ),
            (
                vec!["--generate-completions", "fish"],
                format!("completions/{tool}.fish"),
            ),
            (vec!["--generate-man"], format!("man/{tool}.1")),
        ] {
            let out = std::process::Command::new(&exe)
                .args(&args)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{tool} {args:?}");
            assert_eq!(
                out.stdout,
                std::fs::read(root().join(&file)).unwrap(),
                "{tool} {args:?} prints what {file} holds"
            );
        }
    }
}

/// One message style: a usage error starts with the tool's name like every
/// other error (not clap's `error:`), exits 2, and keeps clap's tip and
/// usage; a system error names no `(os error N)`; `--help` exits 0.
#[test]
fn usage_errors_speak_like_every_other_error() {
    for cmd in mooncdc::cli::args::commands() {
        let tool = cmd.get_name().to_string();
        let exe = env!("CARGO_BIN_EXE_mooncdc-apply").replace("mooncdc-apply", &tool);
        let out = std::process::Command::new(&exe)
            .arg("--bogus")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tool}: {err}");
        assert!(
            err.starts_with(&format!("{tool}: unexpected argument '--bogus' found")),
            "{tool}: {err}"
        );
        assert!(
            err.contains("Usage:") && err.contains("--help"),
            "{tool}: {err}"
        );
        let out = std::process::Command::new(&exe)
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{tool} --help");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mooncdc-merge"))
        .arg("/nonexistent/input.jsonl")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(
            "mooncdc-merge: /nonexistent/input.jsonl: cannot open input: No such file or directory"
        ) && !err.contains("os error"),
        "{err}"
    );
}
