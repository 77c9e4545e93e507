//! Sidecar checksum files (haul_fetch::verify::parse_sidecar).
//! The body is `haul_fuzz_targets::sidecar`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::sidecar(data));
