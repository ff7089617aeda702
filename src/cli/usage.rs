//! Usage errors as one line: clap renders its error as a block (the error, its tips, the
//! usage, a pointer to `--help`); diag keeps every part a reader needs, clap's suggestions
//! first among them, and prints them on the one `diag: …` line every other error gets.

use clap::error::ErrorKind;
use clap::CommandFactory;

use super::Cli;

/// What a clap error prints, and where: help and version on stdout (exit 0) and the help
/// shown for a missing subcommand (exit 2) stay clap's own text; every other error becomes
/// one line.
pub enum Printed {
    /// clap prints it as it is.
    Clap,
    /// `diag: …`, on stderr.
    Line(String),
}

/// The global flags (`GlobalArgs`) by their argument ids.
const GLOBALS: [&str; 4] = ["db", "config", "quiet", "no_progress"];

/// The global flags that have an effect in the subcommand at `path` (`["serve", "status"]`);
/// the others are hidden there (still taken, so a script that passes `-q` everywhere keeps
/// working, but not shown in its help, usage or man page).
pub fn globals_that_apply(path: &[&str]) -> &'static [&'static str] {
    match path {
        // Their progress line: --quiet hides it too.
        ["ask"] | ["eval"] | ["investigate", ..] => &["db", "config", "quiet", "no_progress"],
        ["report"] | ["export"] | ["serve"] => &["db", "config", "quiet"],
        ["replay"] | ["trace"] | ["runs"] | ["gc"] | ["mcp"] | ["serve", "status"] => {
            &["db", "config"]
        }
        ["store", ..] => &["config"],
        ["graph"] | ["completions"] | ["man"] => &[],
        // diag itself, and anything not listed: every flag shown.
        _ => &GLOBALS,
    }
}

/// diag's command line as it parses and as its help, completions and man pages show it: the
/// derived definition, where each subcommand takes the global flags that have no effect
/// there as hidden flags of its own ([`globals_that_apply`]): still accepted and read as
/// before (clap merges a subcommand's value of a global flag's id into the global one), not
/// shown in its help, usage, completions or man page.
pub fn command() -> clap::Command {
    let cmd = Cli::command();
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| GLOBALS.contains(&a.get_id().as_str()))
        .cloned()
        .collect();
    hide_globals(cmd, &globals, &mut Vec::new())
}

fn hide_globals(
    mut cmd: clap::Command,
    globals: &[clap::Arg],
    path: &mut Vec<String>,
) -> clap::Command {
    if !path.is_empty() {
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        let applies = globals_that_apply(&words);
        for arg in globals
            .iter()
            .filter(|a| !applies.contains(&a.get_id().as_str()))
        {
            cmd = cmd.arg(arg.clone().global(false).hide(true));
        }
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        path.push(name.clone());
        cmd = cmd.mut_subcommand(&name, |sub| hide_globals(sub, globals, path));
        path.pop();
    }
    cmd
}

/// How `e` (from parsing `args`, the command line without the program name) is printed.
pub fn printed(e: &clap::Error, args: &[String]) -> Printed {
    if !e.use_stderr() || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return Printed::Clap;
    }
    Printed::Line(one_line(&e.render().to_string(), &command_path(args)))
}

/// The subcommands named on the command line, in order (`["investigate", "alertmanager"]`):
/// the words that name a subcommand of the one before, options and their values skipped.
fn command_path(args: &[String]) -> Vec<String> {
    let mut cmd = command();
    let mut path = Vec::new();
    for arg in args {
        if arg == "--" {
            break;
        }
        let Some(sub) = cmd.find_subcommand(arg).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_string());
        cmd = sub;
    }
    path
}

/// clap's rendered error (`error: …`, continuation lines, `tip: …` lines, `Usage: …`,
/// `For more information, try '--help'.`) folded into one line: the error and its
/// continuations joined by spaces, then each tip and the usage after `; `, then which help to
/// read (`diag runs --help` for the subcommand in `path`).
pub fn one_line(rendered: &str, path: &[String]) -> String {
    let mut error = Vec::new();
    let mut tips = Vec::new();
    let mut usage = None;
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("error:") {
            error.push(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("tip:") {
            tips.push(format!("tip: {}", rest.trim()));
        } else if let Some(rest) = line.strip_prefix("Usage:") {
            usage = Some(format!("usage: {}", rest.trim()));
        } else if line.starts_with("For more information") {
            continue;
        } else if usage.is_some() {
            // A usage of several lines (one per form) continues it.
            if let Some(u) = usage.as_mut() {
                u.push(' ');
                u.push_str(line);
            }
        } else {
            error.push(line.to_string());
        }
    }
    let mut out = error.join(" ");
    for part in tips.into_iter().chain(usage) {
        out.push_str("; ");
        out.push_str(&part);
    }
    let help = std::iter::once("diag")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    out.push_str(&format!(" ({help} --help says more)"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_flag_is_shown_only_where_it_has_an_effect_and_taken_everywhere() {
        use clap::FromArgMatches;
        let shown = |path: &[&str]| -> Vec<String> {
            let mut cmd = command();
            cmd.build();
            for word in path {
                cmd = cmd.find_subcommand(word).unwrap().clone();
            }
            let mut ids: Vec<String> = cmd
                .get_arguments()
                .filter(|a| GLOBALS.contains(&a.get_id().as_str()) && !a.is_hide_set())
                .map(|a| a.get_id().to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(shown(&["ask"]), ["config", "db", "no_progress", "quiet"]);
        assert_eq!(shown(&["trace"]), ["config", "db"]);
        assert_eq!(shown(&["serve", "status"]), ["config", "db"]);
        assert_eq!(shown(&["store", "copy"]), ["config"]);
        assert!(shown(&["graph"]).is_empty());
        assert!(shown(&["man"]).is_empty());
        // Still parsed wherever they go, and read as before (where hidden, nothing reads
        // them).
        let parse = |args: &[&str]| {
            let m = command()
                .try_get_matches_from(std::iter::once("diag").chain(args.iter().copied()))
                .unwrap();
            Cli::from_arg_matches(&m).unwrap()
        };
        assert!(parse(&["ask", "q", "--quiet"]).global.quiet);
        assert!(parse(&["-q", "ask", "q"]).global.quiet);
        assert_eq!(
            parse(&["runs", "--db", "x.db"]).global.db,
            Some(std::path::PathBuf::from("x.db"))
        );
        let graph = parse(&["graph", "--quiet", "--db", "x.db"]);
        assert!(graph.global.quiet);
    }

    fn path(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_clap_block_folds_into_one_line_keeping_its_tip_and_usage() {
        let rendered = "error: unexpected argument '--limt' found\n\n  tip: a similar argument \
                        exists: '--limit'\n\nUsage: diag runs --limit <LIMIT>\n\nFor more \
                        information, try '--help'.\n";
        assert_eq!(
            one_line(rendered, &path(&["runs"])),
            "unexpected argument '--limt' found; tip: a similar argument exists: '--limit'; \
             usage: diag runs --limit <LIMIT> (diag runs --help says more)"
        );
        let rendered = "error: the following required arguments were not provided:\n  \
                        <RUN_ID>\n\nUsage: diag report <RUN_ID>\n\nFor more information, try \
                        '--help'.\n";
        assert_eq!(
            one_line(rendered, &path(&["report"])),
            "the following required arguments were not provided: <RUN_ID>; usage: diag \
             report <RUN_ID> (diag report --help says more)"
        );
        let rendered = "error: invalid value 'pdf' for '--report-format <REPORT_FORMAT>'\n  \
                        [possible values: html, md]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered, &path(&[])),
            "invalid value 'pdf' for '--report-format <REPORT_FORMAT>' [possible values: html, \
             md] (diag --help says more)"
        );
    }

    #[test]
    fn the_command_path_names_subcommands_only() {
        let args = |a: &[&str]| a.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command_path(&args(&["--db", "x.db", "runs", "--limt", "3"])),
            ["runs"]
        );
        assert_eq!(
            command_path(&args(&["investigate", "alertmanager", "--urll", "x"])),
            ["investigate", "alertmanager"]
        );
        // A question that happens to be a subcommand's name is a value, not a subcommand.
        assert_eq!(command_path(&args(&["ask", "trace"])), ["ask"]);
        assert!(command_path(&args(&["trac"])).is_empty());
    }
}
