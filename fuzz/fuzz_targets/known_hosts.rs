//! known_hosts lines and host patterns (haul_sftp::known_hosts).
//! The body is `haul_fuzz_targets::known_hosts`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::known_hosts(data));
