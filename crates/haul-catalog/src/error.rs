//! Why the catalog failed, in words: what happened and what to do
//! (SQLite's and PostgreSQL's own texts name a code, not a cause).

/// Why the catalog failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The catalog URL is neither `sqlite:PATH` nor `postgres://…`.
    #[error("catalog {0:?}: use sqlite:/path/to/catalog.db or postgres://user@host/db")]
    Url(String),
    /// SQLite refused.
    #[error("SQLite catalog: {}", sqlite_message(.0))]
    Sqlite(#[from] rusqlite::Error),
    /// SQLite could not open the catalog file, and why (found out by
    /// trying to open it for writing: SQLite itself only says "unable to
    /// open database file").
    #[error("SQLite catalog {path}: {why}")]
    Open {
        /// The catalog file.
        path: String,
        /// What stops it being opened, and what to do.
        why: String,
    },
    /// PostgreSQL refused or is unreachable.
    #[error("PostgreSQL catalog: {}", postgres_message(.0))]
    Postgres(#[from] ::postgres::Error),
    /// The PostgreSQL URL's settings are wrong (sslmode, root certificate…).
    #[error("PostgreSQL catalog {0}")]
    Connect(String),
    /// The catalog was written by a newer haul.
    #[error("the catalog's schema is version {found}, newer than this haul knows ({known}): upgrade haul")]
    TooNew {
        /// The schema version found.
        found: i64,
        /// The newest version this haul knows.
        known: i64,
    },
    /// A lock of the driver was poisoned by a panic elsewhere.
    #[error("the catalog connection is unusable after an earlier failure: restart haul")]
    Poisoned,
}

/// A PostgreSQL error with what the server or the TLS layer said (the
/// crate's own text is only "db error" or "error performing TLS handshake").
fn postgres_message(e: &::postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let said = format!("{}: {}", db.severity(), db.message());
        return match postgres_hint(db.code().code()) {
            Some(hint) => format!("{said} ({hint})"),
            None => said,
        };
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    let lower = text.to_lowercase();
    if lower.contains("connection refused") {
        text.push_str(" (is PostgreSQL running and listening on the URL's host and port?)");
    } else if lower.contains("tls") || lower.contains("certificate") || lower.contains("ssl") {
        text.push_str(
            " (check the URL's sslmode and sslrootcert against the server's certificate)",
        );
    }
    text
}

/// What to do about a PostgreSQL error, by its SQLSTATE.
fn postgres_hint(code: &str) -> Option<&'static str> {
    Some(match code {
        "28P01" | "28000" => {
            "the server refused the login: check the user and password in the URL (or PGPASSFILE) and the server's pg_hba.conf"
        }
        "3D000" => "the database does not exist: create it (createdb NAME) or fix the URL",
        "42501" => "the user may not do this: grant it rights on the catalog's tables",
        "25006" => {
            "the server is a read-only standby (failing over?): point the URL at the primary, or add target_session_attrs=read-write"
        }
        "53100" => "the database server's disk is full: free space there",
        "57P01" | "57P02" | "57P03" => "the server is shutting down or starting: haul tries again",
        _ => return None,
    })
}

/// SQLite's error with what it means for a catalog and what to do.
fn sqlite_message(e: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode as C;
    let hint = match e.sqlite_error_code() {
        Some(C::ReadOnly) => {
            "the catalog is read-only (its file, its directory or its filesystem): make them writable for the daemon's user, or remount the filesystem read-write"
        }
        Some(C::DiskFull) => {
            "the filesystem holding the catalog is full: free space there (df -h on its directory)"
        }
        Some(C::DatabaseBusy | C::DatabaseLocked) => {
            "the catalog is locked by another process (another haul or a sqlite3 shell in a long transaction): end it, or give each daemon its own catalog"
        }
        Some(C::DatabaseCorrupt | C::NotADatabase) => {
            "the catalog file is corrupt or not a haul catalog: restore it from a backup, or move it aside (a new catalog fetches every file again)"
        }
        Some(C::CannotOpen) => {
            "the catalog cannot be opened: its directory is missing, not writable or on a read-only filesystem (SQLite makes files beside it)"
        }
        Some(C::PermissionDenied) => {
            "permission denied: give the daemon's user access to the catalog file and its directory"
        }
        Some(C::SystemIoFailure) => {
            "the disk failed to read or write the catalog: check the filesystem and the kernel log"
        }
        _ => return e.to_string(),
    };
    format!("{hint} ({e})")
}
