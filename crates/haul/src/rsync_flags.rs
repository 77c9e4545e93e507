//! rsync's flags as its users type them. The ones whose meaning haul
//! already has are accepted ([`crate::cli::RsyncArgs`]); for the others, an
//! unknown-flag error says what haul does instead or that it does not do
//! it yet — never clap's generic tip, which reads `-a` as a value to quote.

use clap::builder::StyledStr;
use clap::error::{ContextKind, ContextValue, ErrorKind};

/// rsync flags haul does not take, each with what to do instead.
const TIPS: &[(&[&str], &str)] = &[
    (
        &["--compress-choice", "--zc", "--zl", "--skip-compress"],
        "haul compresses with zstd only (-z, --compress-level N), and skips by itself every chunk that does not shrink",
    ),
    (
        &["--chown", "--usermap", "--groupmap"],
        "haul keeps owners and groups as they are (-o, -g; by name, or --numeric-ids) and maps nothing",
    ),
    (
        &["--fake-super", "--super", "--no-super"],
        "a haul node applies owners when it runs as root with `haul serve --keep-owners`",
    ),
    (
        &["--chmod", "-E", "--executability"],
        "haul keeps the source's permission bits as they are",
    ),
    (
        &["--ignore-times", "-I"],
        "haul skips a file whose size and mtime match and sends the others; -c compares content instead",
    ),
    (
        &["--existing"],
        "not offered yet (haul has --ignore-existing, its opposite)",
    ),
    (
        &["--del", "--delete-before", "--delete-during", "--delete-delay", "--delete-after"],
        "use --delete: haul deletes only after every file verified (rsync's --delete-after)",
    ),
    (
        &["--remove-source-files"],
        "a pull from FTP, SFTP, HTTP or S3 has --delete-source",
    ),
    (
        &["-f", "--filter", "-F"],
        "use --include and --exclude, or --filter-from FILE (`+ GLOB` / `- GLOB` lines)",
    ),
    (
        &["--partial-dir", "-T", "--temp-dir", "--delay-updates"],
        "haul stages every file under .haul/ beneath the destination, resumes it there and renames it into place only once verified",
    ),
    (
        &["--inplace", "--append", "--append-verify", "-W", "--whole-file", "--no-whole-file"],
        "haul never writes a file in place: it sends whole changed files, stages them, and resumes partial ones itself",
    ),
    (
        &["--out-format", "--info", "--debug"],
        "-v names each file sent; --json prints every event as a JSON line",
    ),
    (
        &["--log-file-format"],
        "haul's --log-file lines have a fixed form: --log-format text or json",
    ),
    (
        &["-x", "--one-file-system", "-R", "--relative", "--no-implied-dirs"],
        "not offered by haul yet",
    ),
    (
        &["-L", "--copy-links", "-k", "--copy-dirlinks", "-K", "--keep-dirlinks", "--safe-links", "--copy-unsafe-links"],
        "haul sends symlinks as symlinks and never follows one out of the tree",
    ),
    (
        &["-m", "--prune-empty-dirs"],
        "haul does that already when the rules pick files (an --include, a size or age rule): a directory in which nothing was taken is not made",
    ),
    (
        &["--port"],
        "give the port in the URL: haul://HOST:PORT/PATH",
    ),
    (
        &["--list-only"],
        "use `haul ls URL` (-R for the whole tree)",
    ),
    (
        &["--contimeout"],
        "use --connect-timeout SECONDS",
    ),
    (
        &["--rsync-path"],
        "use --remote-haul PATH (haul on the far side of host:path)",
    ),
    (
        &["--password-file"],
        "a haul node takes --token-file FILE",
    ),
    (
        &["--link-dest", "--compare-dest", "--copy-dest"],
        "not offered by haul: it compares with DEST itself only (-c by content); a file already there with the same data is not sent",
    ),
    (
        &["--mkpath"],
        "haul makes a missing destination directory itself, as --mkpath does",
    ),
    (
        &["-C", "--cvs-exclude"],
        "name what to leave out: --exclude GLOB, or --exclude-from FILE",
    ),
    (
        &["-O", "--omit-dir-times", "-J", "--omit-link-times"],
        "haul always keeps the mtimes of directories and symlinks",
    ),
    (
        &["--modify-window", "-@"],
        "haul compares mtimes to the nanosecond the filesystems keep; --size-only or -c when they cannot agree",
    ),
    (
        &["-y", "--fuzzy"],
        "haul resumes a partial file of the same name by its verified chunks; it does not look for similar files",
    ),
    (
        &["--ignore-errors", "--force-delete"],
        "haul's --delete removes nothing when anything failed, by design",
    ),
    (
        &["--ignore-missing-args", "--delete-missing-args"],
        "a --files-from path the source lacks is named: a local source's stops the run (exit 2) before anything is sent, a node's or server's fails (exit 23); nothing is deleted for it",
    ),
    (
        &["--preallocate", "--fsync", "--open-noatime"],
        "haul writes each file to a staging name, makes it durable and renames it into place once verified: nothing to set",
    ),
    (
        &["-s", "--protect-args", "--secluded-args", "--old-args", "--iconv", "-8", "--8-bit-output"],
        "haul's names are UTF-8 (others are skipped with a warning) and never pass through a remote shell's word splitting: nothing to set",
    ),
    (
        &["-U", "--atimes", "-N", "--crtimes"],
        "haul keeps mtimes, not access or creation times",
    ),
    (
        &["-4", "--ipv4", "-6", "--ipv6", "--address", "--sockopts", "--blocking-io", "--outbuf"],
        "give the address in the URL (haul://[::1]:7878/PATH for IPv6); haul sets its sockets itself",
    ),
    (
        &["-d", "--dirs", "--no-recursive", "--no-r"],
        "haul always recurses; --max-depth 0 takes the top's own files only",
    ),
    (
        &["--no-perms", "--no-p", "--no-times", "--no-t", "--no-owner", "--no-o", "--no-group", "--no-g", "--no-links", "--no-l"],
        "haul always keeps permission bits, mtimes and symlinks; owners and groups only with -a, -o, -g",
    ),
    (
        &["-B", "--block-size", "--checksum-choice", "--cc", "--checksum-seed"],
        "haul verifies every chunk with BLAKE3 and sizes chunks itself (--chunk-memory bounds the memory)",
    ),
    (
        &["--write-batch", "--only-write-batch", "--read-batch"],
        "not offered by haul; a fan-out (haul push DATA node1 node2 …) sends one dataset to many nodes at once",
    ),
    (
        &["--stop-after", "--time-limit", "--stop-at"],
        "--max-transfer SIZE stops starting files after SIZE; a timeout of your own (timeout 1h haul …) and the same command later resumes",
    ),
    (
        &["--copy-devices", "--write-devices", "--devices", "--specials"],
        "haul sends regular files, directories and symlinks; devices, FIFOs and sockets are skipped with a warning",
    ),
    (
        &["-M", "--remote-option", "--daemon", "--no-motd"],
        "a haul node is `haul serve`; over ssh, haul starts one itself (--remote-haul PATH names it)",
    ),
];

/// What to say instead of clap's generic tip when `flag` (as typed,
/// `--flag=value` or a bundled `-x`) is one of rsync's.
pub fn tip(flag: &str) -> Option<&'static str> {
    let name = flag.split('=').next().unwrap_or(flag);
    TIPS.iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, tip)| *tip)
}

/// `e` with the rsync tip in place of clap's suggestions, when the flag it
/// did not know is one of rsync's.
pub fn explain(mut e: clap::Error) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(flag)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(tip) = tip(flag) else {
        return e;
    };
    let tip = format!(
        "{} is rsync's; {tip}",
        flag.split('=').next().unwrap_or(flag)
    );
    e.remove(ContextKind::SuggestedArg);
    e.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![StyledStr::from(tip)]),
    );
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsyncs_flags_get_their_tip_and_others_none() {
        assert!(tip("--zc=lz4").is_some_and(|t| t.contains("zstd only")));
        assert!(tip("--skip-compress").is_some());
        assert!(tip("--append-verify").is_some_and(|t| t.contains("in place")));
        assert!(tip("--link-dest=/prev").is_some_and(|t| t.contains("-c")));
        assert!(tip("--no-perms").is_some_and(|t| t.contains("permission bits")));
        assert_eq!(tip("--frobnicate"), None);
        // Every flag is in one entry only.
        let mut seen = std::collections::HashSet::new();
        for (names, _) in TIPS {
            for n in *names {
                assert!(seen.insert(*n), "{n} twice");
            }
        }
    }
}
