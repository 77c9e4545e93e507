//! An HTML index page fed in pieces (haul_http::index::IndexParser).
//! The body is `haul_fuzz_targets::http_index`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::http_index(data));
