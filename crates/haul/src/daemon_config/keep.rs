//! A source's `keep`: what its pulls from a node and its deliveries to
//! sites keep beyond mode and mtime, named as `haul push`'s long flags
//! (`keep = ["owner", "group", "xattrs", "acls"]`; `"archive"` is `-a`'s
//! owners and groups).

use haul_proto::Keep;

/// The names `keep` takes, as `--help` spells the flags.
const NAMES: &str = "archive, owner, group, numeric-ids, xattrs, acls, sparse";

/// `keep`'s list as what a transfer keeps; an unknown name, or one the
/// daemon cannot keep, says which and what it takes.
pub(crate) fn parse(names: &[String]) -> Result<Keep, String> {
    let mut keep = Keep::default();
    for name in names {
        match name.as_str() {
            "archive" => (keep.owner, keep.group) = (true, true),
            "owner" => keep.owner = true,
            "group" => keep.group = true,
            "numeric-ids" => keep.numeric_ids = true,
            "xattrs" => keep.xattrs = true,
            "acls" => keep.acls = true,
            "sparse" => keep.sparse = true,
            "hard-links" => {
                return Err(
                    "\"hard-links\" is not for the daemon: its runs and deliveries move chosen \
                     files, so a further name would arrive as a copy of its own"
                        .into(),
                )
            }
            other => return Err(format!("{other:?} is not one of: {NAMES}")),
        }
    }
    if keep.numeric_ids && !(keep.owner || keep.group) {
        return Err("\"numeric-ids\" says how owners and groups go: add \"owner\", \"group\" or \"archive\"".into());
    }
    Ok(keep)
}

/// What `keep` keeps, as `--check` shows it (`None`: mode and mtime only).
pub(crate) fn shown(keep: Keep) -> Option<String> {
    let names = [
        (keep.owner, "owner"),
        (keep.group, "group"),
        (keep.numeric_ids, "numeric-ids"),
        (keep.xattrs, "xattrs"),
        (keep.acls, "acls"),
        (keep.sparse, "sparse"),
    ];
    let kept: Vec<&str> = names
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(names: &[&str]) -> Result<Keep, String> {
        parse(&names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn keep_names_the_flags_it_stands_for() {
        let k = of(&["archive", "xattrs", "acls"]).unwrap();
        assert!(k.owner && k.group && k.xattrs && k.acls && !k.sparse && !k.hard_links);
        assert_eq!(shown(k).as_deref(), Some("owner, group, xattrs, acls"));
        assert_eq!(of(&[]).unwrap(), Keep::default());
        assert_eq!(shown(Keep::default()), None);
        let e = of(&["owners"]).unwrap_err();
        assert!(
            e.contains("\"owners\"") && e.contains("owner, group"),
            "{e}"
        );
        let e = of(&["numeric-ids"]).unwrap_err();
        assert!(e.contains("add \"owner\""), "{e}");
        assert!(of(&["archive", "numeric-ids"]).unwrap().numeric_ids);
        let e = of(&["hard-links"]).unwrap_err();
        assert!(e.contains("not for the daemon"), "{e}");
    }
}
