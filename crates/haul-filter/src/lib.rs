//! Which files a transfer takes: one set of rsync-like rules for every
//! source haul reads (local trees pushed or copied, a node's listing
//! pulled, FTP/SFTP/HTTP/S3 crawls), so `--include`, `--exclude`,
//! `--filter-from`, `--min-size`, `--max-size`, `--newer-than` and
//! `--max-depth` mean the same everywhere.
//!
//! [`Filter`] holds the rules and decides one path at a time;
//! [`TreeFilter`] applies them to a tree streamed depth first (pruning
//! excluded directories with everything under them); [`parse_filter_file`]
//! reads a `--filter-from` file, [`parse_pattern_file`] an `--exclude-from`
//! or `--include-from` one, [`NamedPaths`] a `--files-from` list. Pure:
//! no I/O, no clock.

mod named;
mod rules;
mod tree;

pub use named::{ClimbsOut, NamedPaths};
pub use rules::{parse_filter_file, parse_pattern_file, Captures, Filter, FilterError, RuleKind};
pub use tree::{Node, TreeFilter};
