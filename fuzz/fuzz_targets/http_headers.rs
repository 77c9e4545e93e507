//! HTTP Content-Range, Digest, Repr-Digest, checksum and date headers (haul_http::headers).
//! The body is `haul_fuzz_targets::http_headers`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::http_headers(data));
