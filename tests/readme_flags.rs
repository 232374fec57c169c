//! The README documents every flag of every subcommand, and nothing that `--help` does not know.

use std::collections::BTreeSet;
use std::process::Command;

/// The long flags `compositor <subcommand> --help` lists, `--help` itself aside.
fn help_flags(subcommand: &str) -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_compositor"))
        .args([subcommand, "--help"])
        .output()
        .expect("run compositor");
    assert!(output.status.success(), "{subcommand} --help failed");
    let help = String::from_utf8(output.stdout).expect("UTF-8 help");
    help.lines()
        .filter_map(|line| {
            let option = line.trim_start().trim_start_matches("-h, ");
            let flag = option.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (name != "help").then(|| format!("--{name}"))
        })
        .collect()
}

/// The flags the README's table under `### \`compositor <subcommand>\`` names in its first
/// column.
fn readme_flags(readme: &str, subcommand: &str) -> BTreeSet<String> {
    let heading = format!("### `compositor {subcommand}`");
    let section = readme
        .split_once(&heading)
        .unwrap_or_else(|| panic!("README has no section {heading}"))
        .1;
    let section = section.split("\n#").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" |").next())
        .flat_map(|cell| cell.split(", "))
        .filter_map(|flag| flag.strip_prefix("`--")?.strip_suffix('`'))
        .map(|flag| format!("--{flag}"))
        .collect()
}

#[test]
fn the_readme_lists_exactly_the_flags_of_each_subcommand() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for subcommand in ["run", "controller", "crd"] {
        let help = help_flags(subcommand);
        assert!(
            help.len() > 5,
            "{subcommand}: flags found in --help: {help:?}"
        );
        assert_eq!(
            readme_flags(&readme, subcommand),
            help,
            "README section of `compositor {subcommand}` against its --help"
        );
    }
}
