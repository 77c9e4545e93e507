//! `haul man`: the manual page, generated from the CLI definition
//! (`clap_mangen`): the command, every subcommand with its options, exit
//! codes and environment variables, as roff on stdout.

use std::io::Write;

use anyhow::Result;

/// Environment variables haul reads.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "HAUL_TOKEN",
        "The node's token (serve, push, pull), instead of --token.",
    ),
    ("HAUL_TRANSPORT", "tcp or quic, instead of --transport."),
    (
        "HAUL_<FLAG>",
        "Long flags, as rclone's RCLONE_<FLAG>: HAUL_JOBS=4 for --jobs 4, HAUL_MAX_RATE for --max-rate, HAUL_DRY_RUN=1 for --dry-run (switches take 1/0, yes/no, true/false, on/off). A flag on the command line wins; the variable wins over a named node's fingerprint and transport in the config file. --help shows which variable each flag reads. Not read: flags in a conflict with another, flags that remove or weaken a safeguard (--delete*, --force, --to-file, --all, --open, --plaintext, --insecure, --accept-new-host-key, --keep-owners, --create-root), --config, --token-file, --suffix, -0, daemon --check, the filter flags, flags whose variable the daemon sets for its hooks, and anything in a node started over ssh. haul config show lists the variables set.",
    ),
    (
        "HAUL_PASSWORD",
        "The password for FTP, SFTP and HTTP sources, when not in the URL or --password-file.",
    ),
    (
        "HAUL_CONFIG_DIR",
        "Where known_hosts and the node's identity live (default ~/.config/haul).",
    ),
    (
        "XDG_CACHE_HOME",
        "The hash cache's store is $XDG_CACHE_HOME/haul/hashes (default ~/.cache/haul/hashes), for files that cannot carry the user.haul.blake3 attribute; the rates QUIC transfers with each node reached, which the next one starts at (--rate-hint), are in $XDG_CACHE_HOME/haul/paths.",
    ),
    (
        "HAUL_LOG",
        "Log filter for stderr, in tracing's EnvFilter syntax (e.g. debug, haul_node=trace).",
    ),
    ("HAUL_LAB", "The lab's state directory (haul lab)."),
    (
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN",
        "S3 credentials (else ~/.aws/credentials, AWS_PROFILE).",
    ),
    (
        "AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3",
        "S3 region and endpoint, when --s3-region and --s3-endpoint are not given.",
    ),
];

/// Writes the page to `out`.
pub fn render(out: &mut dyn Write) -> Result<()> {
    let cmd = crate::cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("haul {}", sub.get_name());
        let sub = sub.clone().bin_name(name.clone());
        writeln!(out, ".SH \"{}\"", roff_text(&name.to_uppercase()))?;
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            writeln!(out, "{}", roff_text(&about.to_string()))?;
        }
        let page = clap_mangen::Man::new(sub);
        let mut part = Vec::new();
        page.render_synopsis_section(&mut part)?;
        page.render_options_section(&mut part)?;
        // The subcommand's own sections become subsections of its one.
        let part = String::from_utf8_lossy(&part).replace(".SH ", ".SS ");
        out.write_all(part.as_bytes())?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in crate::exit::TABLE {
        writeln!(out, ".TP\n.B {code}\n{}", roff_text(meaning))?;
    }
    writeln!(out, ".SH ENVIRONMENT")?;
    for (name, meaning) in ENVIRONMENT {
        writeln!(out, ".TP\n.B {}\n{}", roff_text(name), roff_text(meaning))?;
    }
    man.render_version_section(out)?;
    Ok(())
}

/// Text as roff shows it literally: backslashes escaped, and no line
/// starting with a control character (`.` or `'`).
fn roff_text(s: &str) -> String {
    s.lines()
        .map(|l| {
            let l = l.replace('\\', "\\e").replace('-', "\\-");
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
