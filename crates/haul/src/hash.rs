//! `haul hash PATH…`: b3sum's lines (`HASH  PATH`) for every file named or
//! beneath a directory named, answered from the content-hash cache where a
//! record describes the file and kept in it otherwise — so a manifest of a
//! tree haul just sent or received costs no second read. `--check LIST…`
//! verifies such lines as `b3sum --check` does (`PATH: OK`, `PATH: FAILED`,
//! exit 1 if any failed). A name holding a backslash or a newline is
//! escaped as b3sum escapes it (the line starts with `\`).

use std::io::{BufRead, Write};

use anyhow::Result;
use haul_engine::{LocalTree, Source as _};
use haul_proto::EntryKind;

use crate::cli::HashArgs;
use crate::exit;
use crate::output::{json_line, Mode};

/// Runs `haul hash`.
pub fn run(args: &HashArgs, mode: Mode) -> Result<u8> {
    let mut failed = false;
    if args.check {
        for list in &args.paths {
            failed |= check_list(list, mode)?;
        }
    } else {
        for path in &args.paths {
            failed |= hash_path(path, mode);
        }
    }
    Ok(if failed { exit::FAILED } else { exit::OK })
}

/// Prints the hash of `path`, or of every file beneath it; true if one
/// could not be hashed.
fn hash_path(path: &str, mode: Mode) -> bool {
    let followed = std::fs::metadata(path);
    if followed.as_ref().is_ok_and(|m| !m.is_dir()) {
        return match hash_named(path) {
            Ok(hash) => {
                print_line(&hash, path, mode);
                false
            }
            Err(e) => {
                eprintln!("haul: {path}: {e}");
                true
            }
        };
    }
    // A symlink to a directory, named without a `/`: what it points to is
    // walked (as for a file named, the operator's link is followed).
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let walked = if is_link && !path.ends_with('/') {
        format!("{path}/")
    } else {
        path.to_owned()
    };
    let tree = match LocalTree::new(&walked) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("haul: {e}");
            return true;
        }
    };
    let mut failed = false;
    for item in Box::new(tree).entries() {
        match item {
            Ok(src) if src.entry.kind == EntryKind::File => {
                let shown = src.local.display().to_string();
                match haul_engine::source::hash_local(&src) {
                    Ok(hash) => print_line(&hash, &shown, mode),
                    Err(e) => {
                        eprintln!("haul: {e}");
                        failed = true;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("haul: {e}");
                failed = true;
            }
        }
    }
    failed
}

/// The BLAKE3 of the file an operator named (followed if a symlink, as
/// b3sum does).
fn hash_named(path: &str) -> Result<blake3::Hash> {
    let file = std::fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        anyhow::bail!("not a regular file");
    }
    let file = haul_engine::LocalFile::open(file)?.shown_as(path);
    Ok(haul_engine::content::whole_file(&file)?)
}

fn print_line(hash: &blake3::Hash, path: &str, mode: Mode) {
    if mode == Mode::Json {
        json_line(&serde_json::json!({"path": path, "blake3": hash.to_hex().as_str()}));
        return;
    }
    let (escaped, name) = escape(path);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}{}  {name}",
        if escaped { "\\" } else { "" },
        hash.to_hex()
    );
}

/// b3sum's escaping: `\` → `\\`, newline → `\n`, and whether any was done.
fn escape(path: &str) -> (bool, String) {
    if !path.contains(['\\', '\n']) {
        return (false, path.to_owned());
    }
    (true, path.replace('\\', "\\\\").replace('\n', "\\n"))
}

/// One line of a list: the expected hash and the path.
fn parse_line(line: &str) -> Option<([u8; 32], String)> {
    let (escaped, line) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (hex, name) = line.split_once("  ")?;
    let mut want = [0u8; 32];
    hex::decode_to_slice(hex, &mut want).ok()?;
    let name = if escaped {
        let mut out = String::with_capacity(name.len());
        let mut chars = name.chars();
        while let Some(c) = chars.next() {
            match (c, c == '\\') {
                (_, true) => match chars.next()? {
                    '\\' => out.push('\\'),
                    'n' => out.push('\n'),
                    _ => return None,
                },
                (c, false) => out.push(c),
            }
        }
        out
    } else {
        name.to_owned()
    };
    (!name.is_empty()).then_some((want, name))
}

/// Verifies the lines of `list`; true if one failed.
fn check_list(list: &str, mode: Mode) -> Result<bool> {
    let reader: Box<dyn BufRead> = if list == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(list)
            .map_err(|e| anyhow::anyhow!("cannot read the list {list}: {e}"))?;
        Box::new(std::io::BufReader::new(f))
    };
    let (mut bad, mut unreadable, mut malformed) = (0u64, 0u64, 0u64);
    for (n, line) in reader.split(b'\n').enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("cannot read the list {list}: {e}"))?;
        if line.is_empty() {
            continue;
        }
        let parsed = String::from_utf8(line).ok().and_then(|l| parse_line(&l));
        let Some((want, path)) = parsed else {
            eprintln!(
                "haul: {list} line {}: not a b3sum line (HASH, two spaces, PATH)",
                n + 1
            );
            malformed += 1;
            continue;
        };
        let verdict = match hash_named(&path) {
            Ok(h) if *h.as_bytes() == want => "OK",
            Ok(_) => {
                bad += 1;
                "FAILED"
            }
            Err(e) => {
                eprintln!("haul: {path}: {e}");
                unreadable += 1;
                "FAILED"
            }
        };
        if mode == Mode::Json {
            json_line(&serde_json::json!({"path": path, "ok": verdict == "OK"}));
        } else if mode != Mode::Quiet || verdict != "OK" {
            let (escaped, name) = escape(&path);
            println!("{}{name}: {verdict}", if escaped { "\\" } else { "" });
        }
    }
    if bad > 0 {
        eprintln!("haul: WARNING: {bad} computed checksum(s) did NOT match");
    }
    if unreadable > 0 {
        eprintln!("haul: WARNING: {unreadable} listed file(s) could not be read");
    }
    if malformed > 0 {
        eprintln!("haul: WARNING: {malformed} line(s) of {list} are not b3sum lines");
    }
    Ok(bad + unreadable + malformed > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_as_b3sum_writes_them() {
        let h = [7u8; 32];
        for name in ["plain", "with space", "back\\slash", "new\nline"] {
            let (escaped, shown) = escape(name);
            let line = format!(
                "{}{}  {shown}",
                if escaped { "\\" } else { "" },
                hex::encode(h)
            );
            assert_eq!(parse_line(&line), Some((h, name.to_owned())), "{line}");
        }
        assert_eq!(parse_line("zz  x"), None);
        assert_eq!(parse_line(&format!("{}  ", hex::encode(h))), None);
        assert_eq!(parse_line(&format!("\\{}  a\\q", hex::encode(h))), None);
    }
}
